// constrain_tool.cpp — sparkd's constraint engine driven from Python, for the mask oracle
// (tests/integration/test_constrain_oracle.py), the speed benchmark
// (tests/bench/constrain_bench.py) and random outputs for schema validation
// (tests/integration/test_pydantic_schemas.py). Usage: constrain_tool compare|bench|sample
// TOKENIZER_PATH
//
// compare: for each schema, a JSON header line {"spec": {...}, "words": W}, then binary
// records (little-endian int32): 0 = compare, followed by the reference's accepting flag and
// W uint32 mask words (end-of-sequence bits cleared); 1 = advance, followed by a token id;
// 2 = reset to the start; 3 = end of this schema. One JSON line of results per schema,
// with every mismatching step (up to 2000): its index, and up to 8 ids of each difference.
//
// bench: one JSON line per schema {"spec": {...}, "sequences": [[ids...], ...]}; prints
// {"compile_us": x, "mask_us": [...], "error": ...}: the grammar built from scratch (no
// cache), then every sequence replayed, timing each mask.
//
// sample: one JSON line per schema {"spec": {...}, "samples": n, "seed": s, "max_tokens": m};
// prints {"outputs": [text, ...], "unfinished": k, "max_mask_us": x, "total_us": y, "error": ...}: n random
// walks over the allowed tokens (uniform), each under a budget of m tokens (fill_mask's
// finish_within), stopping at an accepting state with probability 1/4 per step or when
// nothing but the end is left. `unfinished` counts walks that did not end complete.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/constrain/constraint.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/util/check.h"

using namespace spark;
using namespace spark::constrain;
using J = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

ConstraintSpec spec_of(const J& j) {
  ConstraintSpec s;
  const std::string kind = j.at("kind");
  if (kind == "json_schema") s.kind = ConstraintSpec::Kind::JSON_SCHEMA, s.schema = j.at("schema").get<std::string>();
  else if (kind == "json_object") s.kind = ConstraintSpec::Kind::JSON_OBJECT;
  else if (kind == "regex") s.kind = ConstraintSpec::Kind::REGEX, s.regex = j.at("regex").get<std::string>();
  else if (kind == "choice") s.kind = ConstraintSpec::Kind::CHOICE, s.choices = j.at("choices").get<std::vector<std::string>>();
  else throw InputError("unknown kind " + kind);
  s.strict = j.value("strict", false);
  return s;
}

bool read_i32(int32_t& v) { return std::fread(&v, 4, 1, stdin) == 1; }

std::vector<int32_t> ids_of(const std::vector<uint64_t>& mask, const std::vector<uint32_t>& ref, bool ours_not_ref, size_t limit, size_t& count) {
  std::vector<int32_t> out;
  count = 0;
  const size_t bits = std::max(mask.size() * 64, ref.size() * 32);
  for (size_t t = 0; t < bits; ++t) {
    const bool ours = t / 64 < mask.size() && ((mask[t / 64] >> (t % 64)) & 1);
    const bool theirs = t / 32 < ref.size() && ((ref[t / 32] >> (t % 32)) & 1);
    if (ours_not_ref ? (ours && !theirs) : (theirs && !ours)) {
      ++count;
      if (out.size() < limit) out.push_back(int32_t(t));
    }
  }
  return out;
}

int compare(const std::shared_ptr<const TokenTable>& table) {
  std::string line;
  while (std::getline(std::cin, line)) {
    const J head = J::parse(line);
    const size_t words = head.at("words");
    J result = {{"compares", 0}, {"mismatches", 0}, {"advance_failures", 0}, {"examples", J::array()}};
    std::shared_ptr<const Constraint> c;
    std::unique_ptr<Matcher> m;
    try {
      c = compile_constraint(spec_of(head.at("spec")), table);
      m = c->new_matcher();
    } catch (const std::exception& e) {
      result["error"] = e.what();
    }
    std::vector<uint32_t> ref(words);
    std::vector<uint64_t> mask;
    int64_t step = 0;
    for (int32_t kind; read_i32(kind) && kind != 3;) {
      if (kind == 0) {
        int32_t accepting = 0;
        read_i32(accepting);
        if (std::fread(ref.data(), 4, words, stdin) != words) return 1;
        if (!m) continue;
        m->fill_mask(mask);
        result["compares"] = result["compares"].get<int64_t>() + 1;
        size_t extra_n = 0, missing_n = 0;
        auto extra = ids_of(mask, ref, true, 8, extra_n);
        auto missing = ids_of(mask, ref, false, 8, missing_n);
        if (extra_n || missing_n || bool(accepting) != m->accepting()) {
          result["mismatches"] = result["mismatches"].get<int64_t>() + 1;
          if (result["examples"].size() < 2000)
            result["examples"].push_back({{"step", step}, {"extra", extra}, {"extra_n", extra_n}, {"missing", missing},
                                          {"missing_n", missing_n}, {"accepting_ref", bool(accepting)},
                                          {"accepting", m->accepting()}});
        }
        ++step;
      } else if (kind == 1) {
        int32_t token = 0;
        read_i32(token);
        if (m && !m->advance(token)) result["advance_failures"] = result["advance_failures"].get<int64_t>() + 1;
      } else if (kind == 2) {
        if (c) m = c->new_matcher();
      } else {
        return 1;
      }
    }
    std::cout << result.dump(-1, ' ', false, J::error_handler_t::replace) << std::endl;
  }
  return 0;
}

int bench(const std::shared_ptr<const TokenTable>& table) {
  std::string line;
  std::vector<uint64_t> mask;
  while (std::getline(std::cin, line)) {
    const J job = J::parse(line);
    J result = {{"mask_us", J::array()}};
    try {
      const ConstraintSpec spec = spec_of(job.at("spec"));
      const auto t0 = Clock::now();
      auto grammar = std::make_shared<const Grammar>(build_grammar(spec));
      Matcher first(grammar, table);  // building the first matcher is part of getting ready
      result["compile_us"] = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
      for (const auto& seq : job.at("sequences")) {
        Matcher m(grammar, table);
        for (int32_t token : seq) {
          const auto t = Clock::now();
          m.fill_mask(mask);
          result["mask_us"].push_back(std::chrono::duration<double, std::micro>(Clock::now() - t).count());
          if (!m.advance(token)) break;
        }
      }
    } catch (const std::exception& e) {
      result["error"] = e.what();
    }
    std::cout << result.dump() << std::endl;
  }
  return 0;
}

int sample(const std::shared_ptr<const TokenTable>& table) {
  std::string line;
  std::vector<uint64_t> mask;
  while (std::getline(std::cin, line)) {
    const J job = J::parse(line);
    J result = {{"outputs", J::array()}, {"unfinished", 0}, {"max_mask_us", 0.0}};
    const auto start = Clock::now();
    try {
      const auto c = compile_constraint(spec_of(job.at("spec")), table);
      std::mt19937_64 rng(job.value("seed", 1));
      const int samples = job.value("samples", 4), max_tokens = job.value("max_tokens", 400);
      double max_us = 0;
      for (int i = 0; i < samples; ++i) {
        auto m = c->new_matcher();
        std::string text;
        for (int left = max_tokens; left > 0; --left) {
          if (m->finished() || (m->accepting() && std::uniform_int_distribution<int>(0, 3)(rng) == 0)) break;
          const auto t = Clock::now();
          m->fill_mask(mask, uint32_t(left - 1));
          max_us = std::max(max_us, std::chrono::duration<double, std::micro>(Clock::now() - t).count());
          std::vector<int32_t> allowed;
          for (size_t w = 0; w < mask.size(); ++w)
            for (uint64_t bits = mask[w]; bits; bits &= bits - 1) allowed.push_back(int32_t(w * 64 + size_t(__builtin_ctzll(bits))));
          if (allowed.empty()) break;
          const int32_t pick = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
          if (!m->advance(pick)) break;
          text += table->bytes(pick);
        }
        if (!m->accepting()) result["unfinished"] = result["unfinished"].get<int>() + 1;
        result["outputs"].push_back(text);
      }
      result["max_mask_us"] = max_us;
      result["total_us"] = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    } catch (const std::exception& e) {
      result["error"] = e.what();
    }
    std::cout << result.dump(-1, ' ', false, J::error_handler_t::replace) << std::endl;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: constrain_tool compare|bench|sample TOKENIZER_PATH\n");
    return 2;
  }
  auto tokenizer = Tokenizer::load(argv[2]);
  const auto t0 = Clock::now();
  auto table = TokenTable::from_tokenizer(*tokenizer);
  std::fprintf(stderr, "token table: %zu tokens in %.1f ms\n", table->vocab_size(),
               std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  const std::string mode = argv[1];
  return mode == "compare" ? compare(table) : mode == "sample" ? sample(table) : bench(table);
}
