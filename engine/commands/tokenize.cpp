// tokenize.cpp — `sparkd tokenize` and `sparkd detokenize`: JSONL on stdin, one JSON line
// out per input line, for scripts and for checking against reference tokenizers.
#include <cstdio>
#include <ctime>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/commands/commands.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/utf8.h"
#include "engine/util/check.h"
#include "engine/util/flags.h"

namespace spark {

using json = nlohmann::json;

namespace {

std::unique_ptr<Tokenizer> load_for(const Args& args, const char* command) {
  Flags flags(args, {"stats"});
  flags.expect_only({"model", "stats"});
  if (!flags.has("model")) throw InputError(std::string("usage: sparkd ") + command + " --model PATH < input.jsonl");
  return Tokenizer::load(flags.require("model"));
}

bool optional_bool(const json& j, const char* key, bool fallback, size_t line) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_boolean()) throw InputError("line " + std::to_string(line) + ": '" + key + "' must be true or false");
  return j[key].get<bool>();
}

// Runs `handle` on each non-blank stdin line parsed as a JSON object. Input bytes that are
// not UTF-8 are read as U+FFFD, as a Python reader with errors="replace" would.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

template <typename F>
int for_each_line(F&& handle) {
  std::string line, out;
  size_t number = 0;
  while (std::getline(std::cin, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    json j;
    try {
      j = json::parse(utf8::repair_copy(line));
    } catch (const json::exception& e) {
      throw InputError("line " + std::to_string(number) + ": not valid JSON: " + e.what());
    }
    if (!j.is_object()) throw InputError("line " + std::to_string(number) + ": expected a JSON object");
    out.clear();
    try {
      handle(j, number, out);
    } catch (const InputError& e) {
      std::string msg = e.what();
      if (msg.rfind("line ", 0) == 0) throw;
      throw InputError("line " + std::to_string(number) + ": " + msg);
    }
    out += '\n';
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace

int run_tokenize(const Args& args) {
  auto tok = load_for(args, "tokenize");
  // --stats: report encode throughput on stderr, in CPU time of the encode calls only (not
  // JSON or loading), which stays meaningful on a busy machine.
  const bool stats = Flags(args, {"stats"}).has("stats");
  double encode_seconds = 0;
  size_t encode_bytes = 0, encode_ids = 0;
  int rc = for_each_line([&](const json& j, size_t line, std::string& out) {
    if (!j.contains("text") || !j["text"].is_string())
      throw InputError("line " + std::to_string(line) + ": expected {\"text\": \"...\"}");
    bool add_special = optional_bool(j, "add_special_tokens", true, line);
    bool parse_special = optional_bool(j, "parse_special", true, line);
    const std::string& text = j["text"].get_ref<const std::string&>();
    double t0 = stats ? thread_cpu_seconds() : 0;
    auto ids = tok->encode(text, add_special, parse_special);
    if (stats) encode_seconds += thread_cpu_seconds() - t0;
    encode_bytes += text.size();
    encode_ids += ids.size();
    out += "{\"ids\":[";
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i) out += ',';
      out += std::to_string(ids[i]);
    }
    out += "]}";
  });
  if (stats)
    std::fprintf(stderr, "encode: %zu bytes, %zu ids in %.3f s of CPU time: %.2f MB/s\n", encode_bytes, encode_ids, encode_seconds,
                 encode_seconds > 0 ? encode_bytes / encode_seconds / 1e6 : 0.0);
  return rc;
}

int run_detokenize(const Args& args) {
  auto tok = load_for(args, "detokenize");
  return for_each_line([&](const json& j, size_t line, std::string& out) {
    if (!j.contains("ids") || !j["ids"].is_array())
      throw InputError("line " + std::to_string(line) + ": expected {\"ids\": [...]}");
    std::vector<int32_t> ids;
    ids.reserve(j["ids"].size());
    for (const auto& v : j["ids"]) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
        throw InputError("line " + std::to_string(line) + ": ids must be non-negative integers");
      ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
    }
    bool skip = optional_bool(j, "skip_special_tokens", false, line);
    out += json{{"text", tok->decode(ids, skip)}}.dump();
  });
}

}  // namespace spark
