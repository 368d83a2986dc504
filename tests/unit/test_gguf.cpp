// test_gguf.cpp — the GGUF parser against gguf-py's reading of the same files, the
// tokenizer metadata, name mapping, and every malformed-file case of PRACTICES.md.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "engine/model/arch.h"
#include "engine/model/gguf.h"
#include "tests/unit/test_model_golden.h"

using namespace spark;
using spark::testing::golden;
using spark::testing::golden_dir;

namespace {

// Writes GGUF bytes field by field, so each test can break exactly one rule.
struct GgufBuilder {
  std::vector<uint8_t> b;
  template <typename T>
  GgufBuilder& put(T v) {
    const uint8_t* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof(T));
    return *this;
  }
  GgufBuilder& str(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  GgufBuilder& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    b.insert(b.end(), {'G', 'G', 'U', 'F'});
    return put<uint32_t>(version).put<uint64_t>(n_tensors).put<uint64_t>(n_kv);
  }
  GgufBuilder& kv_u32(const std::string& k, uint32_t v) { return str(k).put<uint32_t>(4).put<uint32_t>(v); }
  GgufBuilder& tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    str(name).put<uint32_t>(static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) put<uint64_t>(d);
    return put<uint32_t>(type).put<uint64_t>(offset);
  }
  GgufBuilder& align(size_t a = 32) {
    while (b.size() % a) b.push_back(0);
    return *this;
  }
  GgufBuilder& data(size_t n) {
    b.insert(b.end(), n, 0x3C);
    return *this;
  }
};

GgufFile parse(const std::vector<uint8_t>& b) { return GgufFile::parse(b.data(), b.size(), "t.gguf"); }

// A valid file: one u32 key and one F32 [4] tensor.
GgufBuilder valid() {
  GgufBuilder g;
  g.header(1, 1).kv_u32("k", 7).tensor("w", {4}, 0, 0).align().data(16);
  return g;
}

}  // namespace

TEST_CASE("gguf: the builder's valid file parses") {
  GgufFile f = parse(valid().b);
  CHECK(f.version == 3);
  REQUIRE(f.tensors.size() == 1);
  CHECK(f.tensors[0].shape == std::vector<int64_t>{4});
  CHECK(f.get_int("k") == 7);
  CHECK(f.data_start % 32 == 0);
}

TEST_CASE("gguf: metadata of every value type matches gguf-py") {
  auto g = golden()["quant"];
  GgufFile f = GgufFile::open(golden_dir() + "/" + g["file"].get<std::string>());
  CHECK(f.version == g["version"].get<uint32_t>());
  CHECK(f.alignment == g["alignment"].get<uint64_t>());
  CHECK(f.data_start == g["data_start"].get<uint64_t>());
  for (auto& [key, ref] : g["metadata"].items()) {
    CAPTURE(key);
    const GgufValue* v = f.find(key);
    REQUIRE(v != nullptr);
    auto types = ref["types"].get<std::vector<uint32_t>>();
    CHECK(static_cast<uint32_t>(v->type) == types[0]);
    const auto& val = ref["value"];
    switch (v->type) {
      case GgufType::STRING: CHECK(v->s == val.get<std::string>()); break;
      case GgufType::FLOAT32:
      case GgufType::FLOAT64: CHECK(v->f == val.get<double>()); break;
      case GgufType::BOOL: CHECK((v->i != 0) == val.get<bool>()); break;
      case GgufType::UINT64: CHECK(v->u == val.get<uint64_t>()); break;
      case GgufType::ARRAY: {
        CHECK(static_cast<uint32_t>(v->elem_type) == types[1]);
        if (v->elem_type == GgufType::ARRAY) {
          // gguf-py flattens nested arrays: [[1, 2], [3]] reads as [1, 2, 3].
          std::vector<int64_t> flat;
          for (const GgufValue& item : v->items) {
            CHECK(static_cast<uint32_t>(item.elem_type) == types[2]);
            flat.insert(flat.end(), item.ints.begin(), item.ints.end());
          }
          CHECK(flat == val.get<std::vector<int64_t>>());
          CHECK(v->array_size == 2);
          break;
        }
        REQUIRE(v->array_size == val.size());
        for (size_t i = 0; i < val.size(); ++i) {
          switch (v->elem_type) {
            case GgufType::STRING: CHECK(v->strings[i] == val[i].get<std::string>()); break;
            case GgufType::FLOAT32:
            case GgufType::FLOAT64: CHECK(v->floats[i] == val[i].get<double>()); break;
            case GgufType::UINT64: CHECK(v->uints[i] == val[i].get<uint64_t>()); break;
            case GgufType::BOOL: CHECK((v->ints[i] != 0) == val[i].get<bool>()); break;
            default: CHECK(v->ints[i] == val[i].get<int64_t>()); break;
          }
        }
        break;
      }
      default: CHECK(v->i == val.get<int64_t>()); break;
    }
  }
  // Typed getters: the right type, and a clear error for the wrong one.
  CHECK(f.get_int("m.u32") == 4000000000ll);
  CHECK(f.get_float("m.f64") == 2.0 / 3.0);
  CHECK_INPUT_ERROR(f.get_string("m.u8"), "metadata 'm.u8' is uint8, expected a string");
  CHECK_INPUT_ERROR(f.get_int("m.u64"), "out of range");
  CHECK_FALSE(f.get_int("absent").has_value());
}

TEST_CASE("gguf: tensor infos match gguf-py (names, types, shapes outermost-first)") {
  auto g = golden()["quant"];
  GgufFile f = GgufFile::open(golden_dir() + "/" + g["file"].get<std::string>());
  REQUIRE(f.tensors.size() == g["tensors"].size());
  for (size_t i = 0; i < f.tensors.size(); ++i) {
    const auto& ref = g["tensors"][i];
    CAPTURE(f.tensors[i].name);
    CHECK(f.tensors[i].name == ref["name"].get<std::string>());
    CHECK(std::string(dtype_name(f.tensors[i].dtype)) == ref["type"].get<std::string>());
    CHECK(f.tensors[i].shape == ref["shape"].get<std::vector<int64_t>>());
  }
}

TEST_CASE("gguf: tokenizer metadata becomes a GgufVocab") {
  for (const auto& m : golden()["models"]) {
    const auto& ref = m["vocab"];
    CAPTURE(m["arch"].get<std::string>());
    GgufVocab v = read_gguf_vocab(golden_dir() + "/" + m["gguf"].get<std::string>());
    CHECK(v.model == ref["model"].get<std::string>());
    CHECK(v.pre == ref["pre"].get<std::string>());
    REQUIRE(v.tokens.size() == ref["n_tokens"].get<size_t>());
    std::string joined;
    for (size_t i = 0; i < v.tokens.size(); ++i) joined += (i ? "\n" : "") + v.tokens[i];
    CHECK(spark::testing::fnv64(joined.data(), joined.size()) == ref["tokens_fnv64"].get<std::string>());
    CHECK(v.tokens.back() == ref["last_token"].get<std::string>());
    auto scores = ref["scores"].get<std::vector<double>>();
    for (size_t i = 0; i < scores.size(); ++i) CHECK(v.scores[i] == static_cast<float>(scores[i]));
    CHECK(v.token_types == ref["token_types"].get<std::vector<int32_t>>());
    CHECK(v.merges == ref["merges"].get<std::vector<std::string>>());
    CHECK(v.bos_id == ref["bos"].get<int>());
    CHECK(v.eos_id == ref["eos"].get<int>());
    CHECK(v.unk_id == ref["unk"].get<int>());
    CHECK(v.pad_id == ref["pad"].get<int>());
    CHECK(v.add_bos == ref["add_bos"].get<bool>());
    CHECK(v.add_eos == ref["add_eos"].get<bool>());
    CHECK(v.add_space_prefix == ref["add_space_prefix"].get<bool>());
    CHECK(v.chat_template == ref["chat_template"].get<std::string>());
  }
}

TEST_CASE("gguf: tokenizer metadata is validated") {
  GgufBuilder g;
  g.header(0, 3).str("tokenizer.ggml.model").put<uint32_t>(8).str("gpt2");
  g.str("tokenizer.ggml.tokens").put<uint32_t>(9).put<uint32_t>(8).put<uint64_t>(2).str("a").str("b");
  g.kv_u32("tokenizer.ggml.eos_token_id", 5);
  CHECK_INPUT_ERROR(read_gguf_vocab(parse(g.b)), "tokenizer.ggml.eos_token_id = 5 is outside the vocabulary of 2");
  GgufBuilder h;
  h.header(0, 1).kv_u32("general.x", 1);
  CHECK_INPUT_ERROR(read_gguf_vocab(parse(h.b)), "has no tokenizer");
}

TEST_CASE("gguf: a \"t5\" tokenizer's charsmap bytes and flags are read") {
  for (uint32_t elem_type : {0u, 1u}) {  // UINT8, INT8: llama.cpp accepts both
    GgufBuilder g;
    g.header(0, 4).str("tokenizer.ggml.model").put<uint32_t>(8).str("t5");
    g.str("tokenizer.ggml.tokens").put<uint32_t>(9).put<uint32_t>(8).put<uint64_t>(2).str("a").str("b");
    g.str("tokenizer.ggml.precompiled_charsmap").put<uint32_t>(9).put<uint32_t>(elem_type).put<uint64_t>(3);
    g.put<uint8_t>(0x00).put<uint8_t>(0x80).put<uint8_t>(0xFF);
    g.str("tokenizer.ggml.remove_extra_whitespaces").put<uint32_t>(7).put<uint8_t>(1);
    GgufVocab v = read_gguf_vocab(parse(g.b));
    CHECK(v.precompiled_charsmap == std::string("\x00\x80\xFF", 3));
    CHECK(v.remove_extra_whitespaces);
    // llama.cpp's defaults for a Unigram vocabulary: EOS and a leading space, no BOS.
    CHECK(v.add_eos);
    CHECK_FALSE(v.add_bos);
    CHECK(v.add_space_prefix);
  }
  GgufBuilder g;
  g.header(0, 3).str("tokenizer.ggml.model").put<uint32_t>(8).str("t5");
  g.str("tokenizer.ggml.tokens").put<uint32_t>(9).put<uint32_t>(8).put<uint64_t>(1).str("a");
  g.str("tokenizer.ggml.precompiled_charsmap").put<uint32_t>(9).put<uint32_t>(8).put<uint64_t>(1).str("x");
  CHECK_INPUT_ERROR(read_gguf_vocab(parse(g.b)), "tokenizer.ggml.precompiled_charsmap has type array of string");
}

TEST_CASE("gguf: tensor names map to Hugging Face names") {
  CHECK(gguf_to_hf_name("token_embd.weight") == "model.embed_tokens.weight");
  CHECK(gguf_to_hf_name("output_norm.weight") == "model.norm.weight");
  CHECK(gguf_to_hf_name("output.weight") == "lm_head.weight");
  CHECK(gguf_to_hf_name("blk.12.attn_q.weight") == "model.layers.12.self_attn.q_proj.weight");
  CHECK(gguf_to_hf_name("blk.0.attn_q.bias") == "model.layers.0.self_attn.q_proj.bias");
  CHECK(gguf_to_hf_name("blk.3.attn_output.weight") == "model.layers.3.self_attn.o_proj.weight");
  CHECK(gguf_to_hf_name("blk.3.attn_k_norm.weight") == "model.layers.3.self_attn.k_norm.weight");
  CHECK(gguf_to_hf_name("blk.3.ffn_norm.weight") == "model.layers.3.post_attention_layernorm.weight");
  CHECK(gguf_to_hf_name("blk.3.attn_norm.weight") == "model.layers.3.input_layernorm.weight");
  CHECK(gguf_to_hf_name("blk.3.ffn_down.weight") == "model.layers.3.mlp.down_proj.weight");
  CHECK(gguf_to_hf_name("blk.3.ffn_gate_inp.weight") == "model.layers.3.mlp.gate.weight");
  CHECK(gguf_to_hf_name("blk.3.ffn_up_exps.weight") == "model.layers.3.mlp.experts.{E}.up_proj.weight");
  CHECK(gguf_expert_name("model.layers.3.mlp.experts.{E}.up_proj.weight", 17) == "model.layers.3.mlp.experts.17.up_proj.weight");
  CHECK(gguf_is_stacked_experts("blk.3.ffn_up_exps.weight"));
  CHECK_FALSE(gguf_to_hf_name("blk.x.attn_q.weight").has_value());
  CHECK_FALSE(gguf_to_hf_name("blk.01.attn_q.weight").has_value());
  CHECK_FALSE(gguf_to_hf_name("blk.1.attn_q.scale").has_value());
  CHECK_FALSE(gguf_to_hf_name("rope_freqs.weight").has_value());
  // llama.cpp's Gated DeltaNet parts: A (its -exp) bare, the dt bias as a bias.
  CHECK(gguf_to_hf_name("blk.2.ssm_a") == "model.layers.2.linear_attn.A_log");
  CHECK(gguf_to_hf_name("blk.2.ssm_dt.bias") == "model.layers.2.linear_attn.dt_bias");
  CHECK(gguf_to_hf_name("blk.2.attn_qkv.weight") == "model.layers.2.linear_attn.in_proj_qkv.weight");
  CHECK_FALSE(gguf_to_hf_name("blk.2.attn_qkv").has_value());  // a part with a kind needs it
}

TEST_CASE("gguf: strings past the end of the file or over 16 MiB") {
  GgufBuilder g;
  g.header(0, 1).put<uint64_t>(1000).data(10);
  CHECK_INPUT_ERROR(parse(g.b), "metadata key needs 1000 bytes but only 10 remain");
  GgufBuilder h;
  h.header(0, 1).put<uint64_t>(1ull << 40).data(10);
  CHECK_INPUT_ERROR(parse(h.b), "exceeds the 16 MiB limit");
  GgufBuilder present;  // one byte over the limit, all of it in the file: still refused
  present.header(0, 1).put<uint64_t>((16ull << 20) + 1).data((16u << 20) + 16);
  CHECK_INPUT_ERROR(parse(present.b), "exceeds the 16 MiB limit");
  GgufBuilder v;
  v.header(0, 1).str("k").put<uint32_t>(8).put<uint64_t>(UINT64_MAX);
  CHECK_INPUT_ERROR(parse(v.b), "exceeds the 16 MiB limit");
}

TEST_CASE("gguf: huge array counts are refused before allocating") {
  GgufBuilder g;
  g.header(0, 1).str("k").put<uint32_t>(9).put<uint32_t>(10).put<uint64_t>(1ull << 62).data(64);
  CHECK_INPUT_ERROR(parse(g.b), "array count 4611686018427387904 of uint64 does not fit");
  GgufBuilder s;
  s.header(0, 1).str("k").put<uint32_t>(9).put<uint32_t>(8).put<uint64_t>(UINT64_MAX);
  CHECK_INPUT_ERROR(parse(s.b), "does not fit");
  GgufBuilder n;  // nested arrays deeper than the limit
  n.header(0, 1).str("k").put<uint32_t>(9);
  for (int i = 0; i < 10; ++i) n.put<uint32_t>(9).put<uint64_t>(1);
  n.data(64);
  CHECK_INPUT_ERROR(parse(n.b), "nested deeper");
  GgufBuilder c;
  c.header(UINT64_MAX, 0);
  CHECK_INPUT_ERROR(parse(c.b), "tensor count");
  GgufBuilder k;
  k.header(0, UINT64_MAX);
  CHECK_INPUT_ERROR(parse(k.b), "metadata count");
}

TEST_CASE("gguf: tensor dimensions, counts and types") {
  GgufBuilder dims;
  dims.header(1, 0).tensor("w", {1, 1, 1, 1, 1}, 0, 0).align().data(32);
  CHECK_INPUT_ERROR(parse(dims.b), "has 5 dimensions (at most 4)");
  GgufBuilder ovf;
  ovf.header(1, 0).tensor("w", {1ull << 32, 1ull << 32, 1ull << 32}, 0, 0).align().data(32);
  CHECK_INPUT_ERROR(parse(ovf.b), "element count overflows");
  GgufBuilder unk;
  unk.header(1, 0).tensor("w", {32}, 99, 0).align().data(128);
  CHECK_INPUT_ERROR(parse(unk.b), "unknown tensor type 99");
  GgufBuilder uns;
  uns.header(1, 0).tensor("w", {256}, 10, 0).align().data(128);
  CHECK_INPUT_ERROR(parse(uns.b), "tensor type Q2_K is not supported");
  GgufBuilder row;
  row.header(1, 0).tensor("w", {33}, 2, 0).align().data(128);
  CHECK_INPUT_ERROR(parse(row.b), "not a whole number of 32-element blocks");
  GgufBuilder vt;
  vt.header(0, 1).str("k").put<uint32_t>(13).put<uint32_t>(0);
  CHECK_INPUT_ERROR(parse(vt.b), "unknown metadata value type 13");
  GgufBuilder bo;
  bo.header(0, 1).str("k").put<uint32_t>(7).put<uint8_t>(2);
  CHECK_INPUT_ERROR(parse(bo.b), "bool value 2");
}

TEST_CASE("gguf: data past the end of the file, misaligned or overlapping") {
  GgufBuilder past;
  past.header(1, 0).tensor("w", {8}, 0, 0).align().data(16);
  CHECK_INPUT_ERROR(parse(past.b), "extends past the end of the file");
  GgufBuilder far;
  far.header(1, 0).tensor("w", {8}, 0, UINT64_MAX - 31).align().data(64);
  CHECK_INPUT_ERROR(parse(far.b), "extends past the end of the file");
  GgufBuilder mis;
  mis.header(1, 0).tensor("w", {4}, 0, 4).align().data(64);
  CHECK_INPUT_ERROR(parse(mis.b), "is not a multiple of the alignment 32");
  GgufBuilder al;
  al.header(1, 1).kv_u32("general.alignment", 3).tensor("w", {4}, 0, 0).align().data(64);
  CHECK_INPUT_ERROR(parse(al.b), "general.alignment must be a positive power of two");
  GgufBuilder al64;  // a custom alignment moves the data section and the offsets
  al64.header(1, 1).kv_u32("general.alignment", 64).tensor("w", {4}, 0, 0).align(64).data(16);
  CHECK(parse(al64.b).data_start % 64 == 0);
  GgufBuilder ov;
  ov.header(2, 0).tensor("a", {16}, 0, 0).tensor("b", {16}, 0, 32).align().data(128);
  CHECK_INPUT_ERROR(parse(ov.b), "overlap");
  GgufBuilder dup;
  dup.header(2, 0).tensor("a", {8}, 0, 0).tensor("a", {8}, 0, 32).align().data(64);
  CHECK_INPUT_ERROR(parse(dup.b), "duplicate tensor name 'a'");
  GgufBuilder dk;
  dk.header(0, 2).kv_u32("k", 1).kv_u32("k", 2);
  CHECK_INPUT_ERROR(parse(dk.b), "duplicate metadata key 'k'");
}

TEST_CASE("gguf: magic and version") {
  GgufBuilder m;
  m.b = {'G', 'G', 'U', 'X'};
  m.put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(0);
  CHECK_INPUT_ERROR(parse(m.b), "bad magic");
  CHECK_INPUT_ERROR(parse(GgufBuilder().header(0, 0, 1).b), "version 1 is not supported");
  CHECK_INPUT_ERROR(parse(GgufBuilder().header(0, 0, 4).b), "unsupported GGUF version 4");
  CHECK_INPUT_ERROR(parse(GgufBuilder().header(0, 0, 3u << 24).b), "big-endian");
  CHECK(parse(GgufBuilder().header(0, 0, 2).b).version == 2);
  CHECK_INPUT_ERROR(parse(std::vector<uint8_t>{'G', 'G'}), "magic needs 4 bytes");
}

TEST_CASE("gguf: every truncation of a valid file is a clean error") {
  for (const std::string name : {"quant.gguf", "qwen3moe.gguf"}) {
    auto bytes = spark::testing::read_file(golden_dir() + "/" + name);
    REQUIRE(bytes.size() > 1000);
    // The padding after the last tensor may go; anything shorter must fail cleanly.
    GgufFile whole = parse(bytes);
    uint64_t needed = 0;
    for (const auto& t : whole.tensors) needed = std::max<uint64_t>(needed, whole.data_start + t.offset + t.nbytes);
    REQUIRE(needed <= bytes.size());
    // Every prefix through the metadata and tensor infos, then strides through the data.
    for (size_t n = 0; n < bytes.size(); n += n < 8192 ? 1 : 997) {
      std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
      std::string msg = spark::testing::input_error_of([&] { parse(cut); });
      if (n >= needed)
        CHECK_MESSAGE(msg == "<no error>", name, " prefix ", n, ": ", msg);
      else
        CHECK_MESSAGE(msg.find("GGUF file") != std::string::npos, name, " prefix ", n, ": ", msg);
    }
  }
}
