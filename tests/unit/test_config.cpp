// test_config.cpp — spark.toml parsing: defaults, each class of error, --set overrides.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>

#include "engine/config.h"
#include "engine/util/check.h"
#include "tests/unit/input_errors.h"

using spark::Config;
using spark::InputError;
using spark::parse_config;

using spark::testing::config_error_of;
using spark::testing::contains;

namespace {


const char* kMinimal = "[model]\npath = \"m.gguf\"\n";

}  // namespace

TEST_CASE("config: defaults match the documented ones") {
  Config c = parse_config(kMinimal, "t.toml");
  CHECK(c.model.path == "m.gguf");
  CHECK(c.engine.max_num_seqs == 64);
  CHECK(c.engine.max_num_batched_tokens == 8192);
  CHECK(c.engine.block_size == 16);
  CHECK(c.engine.enable_prefix_caching);
  CHECK(c.engine.enable_chunked_prefill);
  CHECK(c.engine.cuda_graphs);
  CHECK(c.server.port == 8000);
  CHECK(c.peer.enabled == false);
  CHECK(c.log.format == "text");
}

TEST_CASE("config: the shipped spark.toml parses and documents every key") {
  std::ifstream in("spark.toml");
  REQUIRE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  Config c = parse_config(text.str(), "spark.toml");
  CHECK(c.model.path == "models/SmolLM2-135M-Instruct.Q4_1.gguf");
  // Every key the parser knows appears in the shipped file (unknown keys would be refused).
  for (const char* key : {"path", "name", "dtype", "load_format", "max_model_len", "chat_template", "tokenizer",
                          "backend", "max_num_seqs", "max_num_batched_tokens", "block_size", "kv_cache_dtype",
                          "memory_fraction", "enable_prefix_caching", "enable_chunked_prefill", "cuda_graphs",
                          "cpu_threads", "host", "port", "api_keys", "api_key_file", "max_queued_requests", "max_stored_responses",
                          "max_body_bytes", "request_timeout_s", "drain_timeout_s", "cors_origins", "dashboard",
                          "dashboard_auth", "replica_name", "enabled", "role", "head_addr", "transport", "nccl_ifname",
                          "nccl_ib_hca", "layer_split", "timeout_s", "level", "format"})
    CHECK_MESSAGE(contains(text.str(), std::string("\n") + key + " = "), key);
}

TEST_CASE("config: a typo'd key names file:line:column, the key and a suggestion") {
  std::string e = config_error_of("[model]\npath = \"m\"\n[server]\nprot = 9000\n");
  CHECK(contains(e, "t.toml:4:1"));
  CHECK(contains(e, "unknown key 'prot' in [server]"));
  CHECK(contains(e, "did you mean 'port'"));
}

TEST_CASE("config: unknown section and top-level key") {
  CHECK(contains(config_error_of(std::string(kMinimal) + "[servr]\nport = 1\n"), "unknown section [servr]"));
  CHECK(contains(config_error_of("port = 1\n"), "unknown top-level key 'port'"));
}

TEST_CASE("config: wrong type names what was found and what is accepted") {
  std::string e = config_error_of(std::string(kMinimal) + "[engine]\nmax_num_seqs = \"lots\"\n");
  CHECK(contains(e, "t.toml:4:1"));
  CHECK(contains(e, "[engine] max_num_seqs = 'lots': wrong type; accepted: an integer"));
  CHECK(contains(config_error_of(std::string(kMinimal) + "[engine]\nenable_prefix_caching = 1\n"), "true or false"));
  CHECK(contains(config_error_of(std::string(kMinimal) + "[server]\napi_keys = \"k\"\n"), "a list of strings"));
}

TEST_CASE("config: out-of-range numbers and unknown choices") {
  std::string e = config_error_of(std::string(kMinimal) + "[server]\nport = 70000\n");
  CHECK(contains(e, "t.toml:4:1"));
  CHECK(contains(e, "[server] port = 70000: out of range; accepted: an integer from 0 to 65535"));
  CHECK(contains(config_error_of(std::string(kMinimal) + "[engine]\nmemory_fraction = 1.5\n"), "out of range"));
  CHECK(contains(config_error_of(std::string(kMinimal) + "[engine]\nmemory_fraction = nan\n"), "out of range"));
  CHECK(contains(config_error_of(std::string(kMinimal) + "[engine]\nbackend = \"tpu\"\n"),
                 "accepted: one of \"auto\", \"cuda\", \"cpu\""));
  CHECK(contains(config_error_of(std::string(kMinimal) + "[peer]\nlayer_split = \"half\"\n"), "[peer] layer_split"));
  CHECK(config_error_of(std::string(kMinimal) + "[peer]\nlayer_split = 12\n").empty());
  CHECK(config_error_of(std::string(kMinimal) + "[engine]\nmemory_fraction = 1\n").empty());  // integer for a float
}

TEST_CASE("config: contradictory settings are refused with both values") {
  CHECK(contains(config_error_of(std::string(kMinimal) + "[engine]\nmax_num_seqs = 100\nmax_num_batched_tokens = 50\n"),
                 "max_num_batched_tokens (50) is below max_num_seqs (100)"));
  CHECK(contains(config_error_of(std::string(kMinimal) + "[engine]\nblock_size = 24\n"), "power of two"));
  CHECK(contains(config_error_of(std::string(kMinimal) + "[peer]\nenabled = true\n"), "needs head_addr"));
  CHECK(contains(config_error_of(std::string(kMinimal) + "[engine]\nbackend = \"cpu\"\n[peer]\nenabled = true\n"
                                                  "head_addr = \"10.0.0.1:7000\"\n"),
                 "transport = \"nccl\" needs the CUDA backend"));
  CHECK(contains(config_error_of(std::string(kMinimal) + "[server]\ndashboard_auth = \"api_key\"\n"), "no api_keys"));
  CHECK(contains(config_error_of(std::string(kMinimal) + "[server]\napi_keys = [\"short\"]\n"), "shorter than 8"));
  CHECK(contains(config_error_of("[model]\nname = \"x\"\n"), "[model] path is empty"));
  CHECK(contains(config_error_of(std::string(kMinimal) + "max_model_len = 100000\n[engine]\nenable_chunked_prefill = false\n"),
                 "max_num_batched_tokens (8192) >= [model] max_model_len (100000)"));
}

TEST_CASE("config: replica_name must be safe in a header and a metric label") {
  CHECK(config_error_of(std::string(kMinimal) + "[server]\nreplica_name = \"spark-03.lab:8000\"\n").empty());
  CHECK(contains(config_error_of(std::string(kMinimal) + "[server]\nreplica_name = \"a b\"\n"), "[server] replica_name"));
  CHECK(contains(config_error_of(std::string(kMinimal) + "[server]\nreplica_name = \"x\\r\\nSet-Cookie: y\"\n"),
                 "[server] replica_name"));
  CHECK(contains(config_error_of(std::string(kMinimal) + "[server]\nreplica_name = \"" + std::string(65, 'r') + "\"\n"),
                 "up to 64"));
}

TEST_CASE("config: invalid TOML gives its position") {
  std::string e = config_error_of("[model]\npath = \"unterminated\n");
  CHECK(contains(e, "t.toml:2:"));
  CHECK(contains(e, "invalid TOML"));
}

TEST_CASE("config: --set overrides are typed like the key") {
  Config c = parse_config(kMinimal, "t.toml",
                          {"server.port=9001", "engine.enable_prefix_caching=false", "engine.memory_fraction=0.5",
                           "server.host=0.0.0.0", "server.api_keys=[\"abcdefgh\"]", "model.name=\"my model\"",
                           "peer.layer_split=7"});
  CHECK(c.server.port == 9001);
  CHECK(!c.engine.enable_prefix_caching);
  CHECK(c.engine.memory_fraction == doctest::Approx(0.5));
  CHECK(c.server.host == "0.0.0.0");
  REQUIRE(c.server.api_keys.size() == 1);
  CHECK(c.server.api_keys[0] == "abcdefgh");
  CHECK(c.model.name == "my model");
  CHECK(c.peer.layer_split == "7");
}

TEST_CASE("config: bad --set overrides name the override") {
  CHECK(contains(config_error_of(kMinimal, {"server.port=70000"}), "--set server.port=70000: [server] port = 70000: out of range"));
  CHECK(contains(config_error_of(kMinimal, {"server.port=many"}), "wrong type; accepted: an integer"));
  CHECK(contains(config_error_of(kMinimal, {"server.prot=1"}), "unknown key 'prot' in [server]"));
  CHECK(contains(config_error_of(kMinimal, {"sever.port=1"}), "unknown section [sever]"));
  CHECK(contains(config_error_of(kMinimal, {"port"}), "expected section.key=value"));
  CHECK(contains(config_error_of(kMinimal, {"engine.enable_prefix_caching=yes"}), "true or false"));
}
