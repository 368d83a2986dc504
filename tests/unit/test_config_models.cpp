// test_config_models.cpp — several models in one config: [[models]] tables, their checks
// (unique names, shares within the budget, one box), and the Config each model runs with.
#include <doctest/doctest.h>

#include <string>

#include "engine/config.h"
#include "engine/util/check.h"
#include "tests/unit/input_errors.h"

using spark::Config;
using spark::InputError;
using spark::parse_config;

using spark::testing::config_error_of;
using spark::testing::contains;

namespace {


const std::string kThree =
    "[engine]\n"                   // 1
    "memory_fraction = 0.5\n"      // 2
    "[[models]]\n"                 // 3
    "path = \"chat.gguf\"\n"       // 4
    "name = \"chat\"\n"            // 5
    "memory_share = 0.5\n"         // 6
    "[[models]]\n"                 // 7
    "path = \"embed\"\n"           // 8
    "role = \"embed\"\n"           // 9
    "max_model_len = 512\n"        // 10
    "[[models]]\n"                 // 11
    "path = \"models/rerank/\"\n"  // 12
    "role = \"rerank\"\n";         // 13

}  // namespace

TEST_CASE("config models: [[models]] tables in order, the first is model") {
  Config c = parse_config(kThree, "t.toml");
  REQUIRE(c.models.size() == 3);
  CHECK(c.model.path == "chat.gguf");
  CHECK(c.models[0].name == "chat");
  CHECK(c.models[0].memory_share == 0.5);
  CHECK(c.models[1].role == "embed");
  CHECK(c.models[1].max_model_len == 512);
  CHECK(c.models[1].memory_share == 0);  // unset
  CHECK(c.models[2].role == "rerank");
  CHECK(c.models[2].max_model_len == 0);  // each table starts from the defaults
  CHECK(spark::served_model_name(c.models[0]) == "chat");
  CHECK(spark::served_model_name(c.models[1]) == "embed");
  CHECK(spark::served_model_name(c.models[2]) == "rerank");
  // The unset shares split what the set one leaves.
  CHECK(spark::memory_share_of(c, 0) == doctest::Approx(0.5));
  CHECK(spark::memory_share_of(c, 1) == doctest::Approx(0.25));
  CHECK(spark::memory_share_of(c, 2) == doctest::Approx(0.25));
}

TEST_CASE("config models: the Config one model runs with") {
  Config c = parse_config(kThree, "t.toml");
  Config embed = spark::model_run_config(c, 1);
  CHECK(embed.model.path == "embed");
  CHECK(embed.model.role == "embed");
  REQUIRE(embed.models.size() == 1);
  CHECK(embed.models[0].path == "embed");
  CHECK(embed.engine.memory_fraction == doctest::Approx(0.5 * 0.25));
  // Running it through again does not scale the share twice.
  CHECK(spark::model_run_config(embed, 0).engine.memory_fraction == doctest::Approx(0.125));
  Config chat = spark::model_run_config(c, 0);
  CHECK(chat.engine.memory_fraction == doctest::Approx(0.25));
  CHECK(chat.server.port == c.server.port);
}

TEST_CASE("config models: [model] alone is one model with the whole budget") {
  Config c = parse_config("[model]\npath = \"m.gguf\"\n[engine]\nmemory_fraction = 0.7\n", "t.toml");
  REQUIRE(c.models.size() == 1);
  CHECK(c.models[0].path == "m.gguf");
  CHECK(spark::memory_share_of(c, 0) == 1.0);
  CHECK(spark::model_run_config(c, 0).engine.memory_fraction == doctest::Approx(0.7));
  // --set model.KEY still reaches it, and models[0] follows.
  c = parse_config("[model]\npath = \"m.gguf\"\n", "t.toml", {"model.name=x"});
  CHECK(c.models[0].name == "x");
  CHECK(spark::config_for_model("a/b.gguf").models.size() == 1);
}

TEST_CASE("config models: --set model.KEY addresses the first [[models]] entry") {
  Config c = parse_config(kThree, "t.toml", {"model.max_model_len=256"});
  CHECK(c.model.max_model_len == 256);
  CHECK(c.models[0].max_model_len == 256);
  CHECK(c.models[1].max_model_len == 512);
  CHECK(contains(config_error_of(kThree, {"models.path=x"}), "[[models]] entries are not set with --set"));
}

TEST_CASE("config models: errors point at their line") {
  SUBCASE("both forms") {
    std::string e = config_error_of("[model]\npath = \"a.gguf\"\n[[models]]\npath = \"b.gguf\"\n");
    CHECK(contains(e, "both [model] and [[models]]"));
    CHECK(contains(e, "t.toml:3:"));
  }
  SUBCASE("duplicate served names, the file name counting as one") {
    std::string e = config_error_of("[[models]]\npath = \"a/x.gguf\"\n[[models]]\npath = \"b/x\"\nrole = \"embed\"\n");
    CHECK(contains(e, "two models are served as 'x'"));
    CHECK(contains(e, "t.toml:4:1:"));
    e = config_error_of("[[models]]\npath = \"a.gguf\"\nname = \"m\"\n[[models]]\npath = \"b.gguf\"\nname = \"m\"\n");
    CHECK(contains(e, "two models are served as 'm'"));
    CHECK(contains(e, "t.toml:6:1:"));
  }
  SUBCASE("shares above the whole budget") {
    std::string e = config_error_of(
        "[[models]]\npath = \"a.gguf\"\nmemory_share = 0.6\n[[models]]\npath = \"b.gguf\"\nmemory_share = 0.5\n");
    CHECK(contains(e, "the shares add up to 1.1"));
    CHECK(contains(e, "t.toml:6:1:"));
    e = config_error_of("[[models]]\npath = \"a.gguf\"\nmemory_share = 1\n[[models]]\npath = \"b.gguf\"\n");
    CHECK(contains(e, "leaving nothing for the 1 model(s) without one"));
    e = config_error_of("[[models]]\npath = \"a.gguf\"\nmemory_share = 1.5\n");
    CHECK(contains(e, "[[models]] memory_share = 1.5: out of range"));
    CHECK(contains(e, "t.toml:3:1:"));
    e = config_error_of("[[models]]\npath = \"a.gguf\"\nmemory_share = 0\n");
    CHECK(contains(e, "out of range; accepted: a fraction above 0"));
  }
  SUBCASE("an unknown key inside [[models]]") {
    std::string e = config_error_of("[[models]]\npath = \"a.gguf\"\nmemory_shares = 0.5\n");
    CHECK(contains(e, "unknown key 'memory_shares' in [[models]]"));
    CHECK(contains(e, "did you mean 'memory_share'?"));
    CHECK(contains(e, "t.toml:3:1:"));
    // memory_share belongs to [[models]] only
    e = config_error_of("[model]\npath = \"a.gguf\"\nmemory_share = 0.5\n");
    CHECK(contains(e, "unknown key 'memory_share' in [model]"));
  }
  SUBCASE("a wrong value inside [[models]] names the table") {
    std::string e = config_error_of("[[models]]\npath = \"a.gguf\"\n[[models]]\npath = \"b.gguf\"\nrole = \"classify\"\n");
    CHECK(contains(e, "[[models]] role = 'classify': not an accepted value"));
    CHECK(contains(e, "t.toml:5:1:"));
  }
  SUBCASE("per-model checks name the model") {
    std::string e = config_error_of("[[models]]\npath = \"a.gguf\"\n[[models]]\nname = \"b\"\n");
    CHECK(contains(e, "[[models]] 'b' path is empty"));
    CHECK(contains(e, "t.toml:3:"));
    e = config_error_of(
        "[engine]\nspeculative = \"ngram\"\n[[models]]\npath = \"a.gguf\"\n[[models]]\npath = \"e\"\nrole = "
        "\"embed\"\n");
    CHECK(contains(e, "[[models]] 'e' role = \"embed\" generates nothing to speculate on"));
    CHECK(contains(e, "t.toml:7:1:"));
  }
  SUBCASE("[models] written as one table") {
    CHECK(contains(config_error_of("[models]\npath = \"a.gguf\"\n"), "[[models]] tables (double brackets)"));
  }
  SUBCASE("a pair serves one model") {
    std::string e = config_error_of(
        "[peer]\nenabled = true\nhead_addr = \"h:1\"\ntransport = \"tcp\"\n[[models]]\npath = \"a.gguf\"\n"
        "[[models]]\npath = \"b.gguf\"\n");
    CHECK(contains(e, "[peer] enabled = true runs one model split over two boxes, but [[models]] lists 2"));
    CHECK(contains(e, "t.toml:2:1:"));
    // One [[models]] entry in a pair is fine.
    CHECK(config_error_of("[peer]\nenabled = true\nhead_addr = \"h:1\"\ntransport = \"tcp\"\n[[models]]\npath = \"a.gguf\"\n")
              .empty());
  }
}
