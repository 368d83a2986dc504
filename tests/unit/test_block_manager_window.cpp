// test_block_manager_window.cpp — exact block ids when sliding-window layers hold only
// the window blocks: moves behind the window, the copies they ask for, prefix hits that
// need the window's blocks, and a hit given up when its window blocks do not fit.
#include <doctest/doctest.h>

#include <numeric>

#include "engine/core/block_manager.h"

using namespace spark;

namespace {

std::vector<int32_t> iota_tokens(int32_t n, int32_t start = 100) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

// Runs seq's uncomputed tokens as one step would: allocate, compute, register.
void step(BlockManager& bm, Sequence& seq, const PrefixHit* hit = nullptr) {
  const int64_t computed = hit ? hit->num_tokens : seq.num_computed_tokens;
  REQUIRE(bm.allocate(seq, seq.num_tokens() - computed, hit));
  seq.num_computed_tokens = seq.num_tokens();
  bm.cache_full_blocks(seq);
  bm.check_invariants();
}

}  // namespace

TEST_CASE("window blocks: a block behind the window moves to a full-only block, its K/V copied") {
  // Blocks of 2 tokens, a window of 3: ids 0-3 hold every layer, 4-9 full layers only.
  BlockManager bm(10, 2, true, {3, 4});
  Sequence a(1, iota_tokens(5));
  step(bm, a);
  CHECK(a.block_table == std::vector<int32_t>{0, 1, 2});
  CHECK(bm.take_copies().empty());
  // Token 5 sees tokens 3..5: block 0 (tokens 0, 1) is behind every later window.
  a.append_token(7);
  step(bm, a);
  CHECK(a.block_table == std::vector<int32_t>{4, 1, 2});
  CHECK(bm.take_copies() == std::vector<int32_t>{0, 4});
  CHECK(bm.take_copies().empty());
  CHECK(bm.ref_count(0) == 0);
  CHECK(bm.is_cached(0));  // its sliding layers' K/V stay reusable until evicted
  CHECK(bm.is_cached(4));
  CHECK(bm.free_queue() == std::vector<int32_t>{3, 0, 5, 6, 7, 8, 9});
  CHECK(bm.num_free_window_blocks() == 2);

  SUBCASE("a prefix hit takes its early blocks from full-only copies, its window from window blocks") {
    bm.free(a);
    Sequence b(2, {100, 101, 102, 103, 104, 7, 8});
    PrefixHit hit = bm.find_cached_prefix(b);
    // Token 6 sees tokens 4..6: block 2 must hold the sliding layers; 0 and 1 need not.
    CHECK(hit.blocks == std::vector<int32_t>{4, 1, 2});
    CHECK(hit.num_tokens == 6);
    step(bm, b, &hit);
    CHECK(b.block_table == std::vector<int32_t>{4, 1, 2, 3});
    CHECK(b.num_cached_tokens == 6);
    CHECK(bm.take_copies().empty());
  }
}

TEST_CASE("window blocks: a hit shrinks until the sliding layers hold its last window - 1 tokens") {
  BlockManager bm(10, 2, true, {3, 4});
  Sequence a(1, iota_tokens(8));
  step(bm, a);
  CHECK(a.block_table == std::vector<int32_t>{0, 1, 2, 3});
  a.append_token(1);
  step(bm, a);  // token 8 sees 6..8: blocks 0-2 move, their window copies stay cached
  CHECK(a.block_table == std::vector<int32_t>{4, 5, 6, 3, 0});  // 0: the free head, evicted
  CHECK(bm.take_copies() == std::vector<int32_t>{0, 4, 1, 5, 2, 6});

  Sequence other(2, {1, 2, 3, 4});
  step(bm, other);  // takes window blocks 1 and 2, evicting the rest of a's window copies
  CHECK(other.block_table == std::vector<int32_t>{1, 2});

  // Tokens 0..5 are cached in full-only blocks 4-6, but the first token after any hit
  // would need its window in the sliding layers: no hit at all.
  Sequence b(3, {100, 101, 102, 103, 104, 105, 55});
  PrefixHit hit = bm.find_cached_prefix(b);
  CHECK(hit.blocks.empty());
  CHECK(hit.num_tokens == 0);

  // A prompt whose hit ends in a's live window is served up to it.
  Sequence c(4, {100, 101, 102, 103, 104, 105, 106, 107, 55});
  PrefixHit hit_c = bm.find_cached_prefix(c);
  CHECK(hit_c.blocks == std::vector<int32_t>{4, 5, 6, 3});
  CHECK(hit_c.num_tokens == 8);
}

TEST_CASE("window blocks: a shared block moves to the full-only copy another sequence made") {
  BlockManager bm(12, 2, true, {3, 6});
  Sequence a(1, iota_tokens(5));
  step(bm, a);
  CHECK(a.block_table == std::vector<int32_t>{0, 1, 2});
  Sequence b(2, {100, 101, 102, 103, 9, 9});
  PrefixHit hit = bm.find_cached_prefix(b);
  CHECK(hit.blocks == std::vector<int32_t>{0, 1});
  step(bm, b, &hit);
  CHECK(b.block_table == std::vector<int32_t>{0, 1, 3});
  CHECK(bm.ref_count(0) == 2);

  a.append_token(7);
  step(bm, a);  // a leaves block 0 for a copy in 6; b still holds 0
  CHECK(a.block_table == std::vector<int32_t>{6, 1, 2});
  CHECK(bm.take_copies() == std::vector<int32_t>{0, 6});
  CHECK(bm.ref_count(0) == 1);

  b.append_token(8);
  step(bm, b);  // b finds a's copy of block 0 (no copy) and copies block 1 to 7
  CHECK(b.block_table == std::vector<int32_t>{6, 7, 3, 4});
  CHECK(bm.take_copies() == std::vector<int32_t>{1, 7});
  CHECK(bm.ref_count(6) == 2);
  CHECK(bm.ref_count(0) == 0);
  CHECK(bm.ref_count(1) == 1);
  bm.free(a);
  bm.free(b);
  CHECK(bm.num_free_blocks() == 12);
  bm.check_invariants();
}

TEST_CASE("window blocks: a hit whose window blocks do not fit is given up for the prompt's start") {
  BlockManager bm(8, 2, true, {3, 4});
  Sequence a(1, iota_tokens(7));
  step(bm, a);  // one step: nothing moved, blocks 0-2 cached as window blocks
  bm.free(a);
  Sequence b(2, {100, 101, 102, 103, 104, 105, 50, 51, 52});
  PrefixHit hit = bm.find_cached_prefix(b);
  CHECK(hit.blocks == std::vector<int32_t>{0, 1, 2});
  // The hit's 3 window blocks and the 2 the rest needs exceed the 4 there are.
  REQUIRE(bm.allocate(b, 3, &hit));
  CHECK(b.num_computed_tokens == 0);
  CHECK(b.num_cached_tokens == 0);
  CHECK(b.block_table == std::vector<int32_t>{3, 2});
  bm.check_invariants();
}

TEST_CASE("window blocks: without free full-only blocks a block stays in the window blocks") {
  BlockManager bm(5, 2, true, {3, 4});
  Sequence a(1, iota_tokens(4));
  step(bm, a);
  Sequence b(2, iota_tokens(3, 500));
  step(bm, b);
  CHECK(b.block_table == std::vector<int32_t>{2, 3});
  b.append_token(1);
  step(bm, b);
  b.append_token(2);
  step(bm, b);  // token 4 sees 2..4: b's block 0 takes the only full-only block
  CHECK(b.block_table == std::vector<int32_t>{4, 3, 2});
  a.append_token(9);
  CHECK_FALSE(bm.allocate(a, 1));  // no room to move a's block 0, nor for a new block
  CHECK(a.block_table == std::vector<int32_t>{0, 1});
  CHECK(bm.take_copies() == std::vector<int32_t>{2, 4});
  bm.check_invariants();
}
