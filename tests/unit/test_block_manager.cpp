// test_block_manager.cpp — exact block ids, reference counts, eviction order and prefix
// hits of the KV block manager.
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

// Admits seq with whatever the prefix cache holds, then marks its whole prompt computed,
// as a step that ran the prompt would.
void admit_and_compute(BlockManager& bm, Sequence& seq) {
  PrefixHit hit = bm.find_cached_prefix(seq);
  REQUIRE(bm.allocate(seq, seq.num_tokens() - hit.num_tokens, &hit));
  seq.num_computed_tokens = seq.num_tokens();
  bm.cache_full_blocks(seq);
  bm.check_invariants();
}

}  // namespace

TEST_CASE("block manager: allocation takes ids from the head of the free queue") {
  BlockManager bm(8, 4, true);
  CHECK(bm.free_queue() == std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7});
  Sequence a(1, iota_tokens(10));
  PrefixHit hit = bm.find_cached_prefix(a);
  CHECK(hit.blocks.empty());
  REQUIRE(bm.allocate(a, 10, &hit));
  CHECK(a.block_table == std::vector<int32_t>{0, 1, 2});
  CHECK(bm.ref_count(0) == 1);
  CHECK(bm.ref_count(2) == 1);
  CHECK(bm.ref_count(3) == 0);
  CHECK(bm.num_free_blocks() == 5);
  CHECK(bm.free_queue() == std::vector<int32_t>{3, 4, 5, 6, 7});
  bm.check_invariants();
}

TEST_CASE("block manager: decode grows the table only at block boundaries") {
  BlockManager bm(8, 4, true);
  Sequence a(1, iota_tokens(4));
  REQUIRE(bm.allocate(a, 4));
  CHECK(a.block_table == std::vector<int32_t>{0});
  a.num_computed_tokens = 4;
  a.append_token(7);
  REQUIRE(bm.allocate(a, 1));
  CHECK(a.block_table == std::vector<int32_t>{0, 1});
  a.num_computed_tokens = 5;
  a.append_token(8);
  REQUIRE(bm.allocate(a, 1));
  CHECK(a.block_table == std::vector<int32_t>{0, 1});
  bm.check_invariants();
}

TEST_CASE("block manager: freeing returns cached blocks to the tail, last block first") {
  BlockManager bm(8, 4, true);
  Sequence a(1, iota_tokens(10));
  admit_and_compute(bm, a);
  CHECK(a.block_table == std::vector<int32_t>{0, 1, 2});
  CHECK(bm.is_cached(0));
  CHECK(bm.is_cached(1));
  CHECK_FALSE(bm.is_cached(2));  // partial block: never cached
  bm.free(a);
  CHECK(a.block_table.empty());
  // 2 holds nothing reusable: head. 1 then 0 go to the tail, so the deeper block 1 is
  // evicted before the root block 0.
  CHECK(bm.free_queue() == std::vector<int32_t>{2, 3, 4, 5, 6, 7, 1, 0});
  CHECK(bm.num_free_blocks() == 8);
  CHECK(bm.num_cached_blocks() == 2);
  bm.check_invariants();
}

TEST_CASE("block manager: a prefix hit re-references cached blocks and counts tokens") {
  BlockManager bm(8, 4, true);
  Sequence a(1, iota_tokens(10));
  admit_and_compute(bm, a);
  bm.free(a);

  std::vector<int32_t> tokens = iota_tokens(8);
  tokens.insert(tokens.end(), {1, 2, 3});
  Sequence b(2, tokens);
  PrefixHit hit = bm.find_cached_prefix(b);
  CHECK(hit.blocks == std::vector<int32_t>{0, 1});
  CHECK(hit.num_tokens == 8);
  REQUIRE(bm.allocate(b, 3, &hit));
  CHECK(b.block_table == std::vector<int32_t>{0, 1, 2});
  CHECK(b.num_computed_tokens == 8);
  CHECK(b.num_cached_tokens == 8);
  CHECK(bm.ref_count(0) == 1);
  CHECK(bm.ref_count(1) == 1);
  CHECK(bm.free_queue() == std::vector<int32_t>{3, 4, 5, 6, 7});
  CHECK(bm.prefix_cache_queries() == 10 + 11);
  CHECK(bm.prefix_cache_hits() == 8);

  // A third sequence shares the same blocks while b still runs.
  Sequence c(3, iota_tokens(9));
  PrefixHit hit_c = bm.find_cached_prefix(c);
  CHECK(hit_c.blocks == std::vector<int32_t>{0, 1});
  REQUIRE(bm.allocate(c, 1, &hit_c));
  CHECK(c.block_table == std::vector<int32_t>{0, 1, 3});
  CHECK(bm.ref_count(0) == 2);
  CHECK(bm.ref_count(1) == 2);
  bm.free(b);
  CHECK(bm.ref_count(0) == 1);
  CHECK(bm.free_queue() == std::vector<int32_t>{2, 4, 5, 6, 7});
  bm.free(c);
  CHECK(bm.free_queue() == std::vector<int32_t>{3, 2, 4, 5, 6, 7, 1, 0});
  bm.check_invariants();
}

TEST_CASE("block manager: a hash match whose tokens differ is not a hit") {
  // A 64-bit hash collision cannot be found by search; the sequence is given the cached
  // block's hash instead, as a colliding prompt would compute it.
  BlockManager bm(8, 4, true);
  Sequence a(1, iota_tokens(10));
  admit_and_compute(bm, a);
  bm.free(a);
  Sequence b(2, iota_tokens(10, 500));
  b.block_hashes = {a.block_hashes[0]};
  PrefixHit hit = bm.find_cached_prefix(b);
  CHECK(hit.blocks.empty());
  CHECK(hit.num_tokens == 0);
  bm.check_invariants();
}

TEST_CASE("block manager: the last prompt token is never served from the cache") {
  BlockManager bm(8, 4, true);
  Sequence a(1, iota_tokens(8));
  admit_and_compute(bm, a);
  bm.free(a);
  Sequence b(2, iota_tokens(8));
  PrefixHit hit = bm.find_cached_prefix(b);
  CHECK(hit.blocks == std::vector<int32_t>{0});  // block 1 holds the last token
  CHECK(hit.num_tokens == 4);
}

TEST_CASE("block manager: cached free blocks are evicted in LRU order") {
  BlockManager bm(6, 2, true);
  Sequence a(1, {1, 2, 3, 4, 9});  // blocks 0 [1 2], 1 [3 4], 2 [9]
  admit_and_compute(bm, a);
  bm.free(a);
  CHECK(bm.free_queue() == std::vector<int32_t>{2, 3, 4, 5, 1, 0});
  Sequence b(2, {5, 6, 7, 8, 9});  // takes 2, 3, 4: none cached
  admit_and_compute(bm, b);
  CHECK(b.block_table == std::vector<int32_t>{2, 3, 4});
  bm.free(b);
  CHECK(bm.free_queue() == std::vector<int32_t>{4, 5, 1, 0, 3, 2});
  // Four blocks: 4, 5, then evicts 1 (a's second block) and 0 (a's root).
  Sequence c(3, {10, 11, 12, 13, 14, 15, 16});
  admit_and_compute(bm, c);
  CHECK(c.block_table == std::vector<int32_t>{4, 5, 1, 0});
  CHECK(bm.num_cached_blocks() == 5);  // b's two blocks and c's three full blocks
  Sequence a_again(4, {1, 2, 3, 4, 9});
  CHECK(bm.find_cached_prefix(a_again).blocks.empty());
  Sequence b_again(5, {5, 6, 7, 8, 9});
  CHECK(bm.find_cached_prefix(b_again).blocks == std::vector<int32_t>{2, 3});
  bm.check_invariants();
}

TEST_CASE("block manager: a hit on free blocks counts against free space; failure changes nothing") {
  BlockManager bm(4, 2, true);
  Sequence a(1, {1, 2, 3, 4, 5});
  admit_and_compute(bm, a);
  bm.free(a);
  CHECK(bm.free_queue() == std::vector<int32_t>{2, 3, 1, 0});
  Sequence b(2, {1, 2, 3, 4, 6, 7, 8, 9, 10});  // hit 2 blocks, needs 3 more: 5 > 4
  PrefixHit hit = bm.find_cached_prefix(b);
  CHECK(hit.blocks == std::vector<int32_t>{0, 1});
  CHECK_FALSE(bm.allocate(b, 5, &hit));
  CHECK(b.block_table.empty());
  CHECK(b.num_computed_tokens == 0);
  CHECK(bm.free_queue() == std::vector<int32_t>{2, 3, 1, 0});
  CHECK(bm.prefix_cache_queries() == 5);  // the failed admission is not counted
  Sequence c(3, {1, 2, 3, 4, 6, 7, 8});  // hit 2, needs 2 more: fits exactly
  PrefixHit hit_c = bm.find_cached_prefix(c);
  REQUIRE(bm.allocate(c, 3, &hit_c));
  CHECK(c.block_table == std::vector<int32_t>{0, 1, 2, 3});
  CHECK(bm.num_free_blocks() == 0);
  bm.check_invariants();
}

TEST_CASE("block manager: identical content computed twice is cached once") {
  BlockManager bm(8, 2, true);
  Sequence a(1, {1, 2, 3});
  Sequence b(2, {1, 2, 4});
  REQUIRE(bm.allocate(a, 3));
  REQUIRE(bm.allocate(b, 3));  // both admitted before either computed: no hit
  CHECK(a.block_table == std::vector<int32_t>{0, 1});
  CHECK(b.block_table == std::vector<int32_t>{2, 3});
  a.num_computed_tokens = b.num_computed_tokens = 3;
  bm.cache_full_blocks(a);
  bm.cache_full_blocks(b);
  CHECK(bm.is_cached(0));
  CHECK_FALSE(bm.is_cached(2));
  bm.free(a);
  bm.free(b);
  CHECK(bm.free_queue() == std::vector<int32_t>{2, 3, 1, 4, 5, 6, 7, 0});
  bm.check_invariants();
}

TEST_CASE("block manager: without prefix caching nothing is cached or counted") {
  BlockManager bm(4, 2, false);
  Sequence a(1, {1, 2, 3, 4, 5});
  admit_and_compute(bm, a);
  CHECK_FALSE(bm.is_cached(0));
  bm.free(a);
  CHECK(bm.free_queue() == std::vector<int32_t>{0, 1, 2, 3});
  Sequence b(2, {1, 2, 3, 4, 5});
  CHECK(bm.find_cached_prefix(b).blocks.empty());
  CHECK(bm.prefix_cache_queries() == 0);
  CHECK(bm.prefix_cache_hits() == 0);
}

TEST_CASE("block hash: chained over the parent and every token") {
  const int32_t x[] = {1, 2, 3, 4};
  const int32_t y[] = {1, 2, 3, 5};
  CHECK(hash_block(kRootBlockHash, x, 4) == hash_block(kRootBlockHash, x, 4));
  CHECK(hash_block(kRootBlockHash, x, 4) != hash_block(kRootBlockHash, y, 4));
  CHECK(hash_block(kRootBlockHash, x, 4) != hash_block(hash_block(kRootBlockHash, y, 4), x, 4));
}
