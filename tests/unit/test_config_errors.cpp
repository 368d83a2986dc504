// test_config_errors.cpp — config errors point at their line as compilers do: file:line:column,
// the key, the quoted line and a caret under the column. Covers each class of error the README
// lists, and a syntax error planted on every line of the shipped spark.toml.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>

#include "engine/config.h"
#include "engine/util/check.h"

using spark::InputError;
using spark::parse_config;

namespace {

std::string error_of(const std::string& text, const std::string& source = "t.toml") {
  try {
    parse_config(text, source);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

// The message names line:column, quotes the line after the gutter and puts a caret under the
// column (the marker line has column-1 characters before the caret).
void check_points_at(const std::string& e, const std::string& source, int line, int column, const std::string& quoted) {
  INFO(e);
  CHECK(contains(e, source + ":" + std::to_string(line) + ":" + std::to_string(column) + ": "));
  std::string gutter = std::to_string(line) + " | ";
  size_t at = e.find(gutter + quoted + "\n");
  REQUIRE(at != std::string::npos);
  std::string marker = e.substr(e.find('\n', at) + 1);
  size_t bar = marker.find("| ");
  REQUIRE(bar != std::string::npos);
  CHECK(marker.substr(bar + 2) == std::string(size_t(column - 1), ' ') + "^");
}

const std::string kHead = "[model]\npath = \"m.gguf\"\n";

}  // namespace

TEST_CASE("config errors: every class the README lists quotes its line") {
  struct Case {
    std::string body, message;
    int line, column;
    std::string quoted;
  };
  const Case cases[] = {
      {"[server]\nprot = 9000\n", "unknown key 'prot' in [server]", 4, 1, "prot = 9000"},
      {"[servr]\nport = 1\n", "unknown section [servr]", 3, 2, "[servr]"},
      {"[engine]\n  max_num_seqs = \"lots\"\n", "[engine] max_num_seqs = 'lots': wrong type", 4, 3,
       "  max_num_seqs = \"lots\""},
      {"[server]\nport = 70000\n", "[server] port = 70000: out of range; accepted: an integer from 0 to 65535", 4, 1,
       "port = 70000"},
  };
  for (const Case& c : cases) {
    std::string e = error_of(kHead + c.body);
    CHECK(contains(e, c.message));
    check_points_at(e, "t.toml", c.line, c.column, c.quoted);
  }
  SUBCASE("contradictory settings point at one of their keys") {
    std::string e = error_of(kHead + "[engine]\nmax_num_seqs = 100\nmax_num_batched_tokens = 50\n");
    CHECK(contains(e, "max_num_batched_tokens (50) is below max_num_seqs (100)"));
    check_points_at(e, "t.toml", 5, 1, "max_num_batched_tokens = 50");
    e = error_of(kHead + "[engine]\nblock_size = 24\n");
    CHECK(contains(e, "power of two"));
    check_points_at(e, "t.toml", 4, 1, "block_size = 24");
    e = error_of(kHead + "[peer]\nenabled = true\n");
    check_points_at(e, "t.toml", 4, 1, "enabled = true");
    e = error_of(kHead + "role = \"embed\"\n[engine]\nspeculative = \"ngram\"\n");
    CHECK(contains(e, "generates nothing to speculate on"));
    e = error_of(kHead + "role = \"classify\"\n");
    CHECK(contains(e, "[model] role = 'classify'"));
    e = error_of("[model]\nname = \"x\"\n");
    CHECK(contains(e, "[model] path is empty"));
    check_points_at(e, "t.toml", 1, 2, "[model]");
  }
  SUBCASE("a value from --set names the flag, not a line") {
    try {
      parse_config(kHead, "t.toml", {"engine.block_size=24"});
      FAIL("accepted");
    } catch (const InputError& e) {
      CHECK(std::string(e.what()).rfind("--set engine.block_size=24: [engine] block_size = 24", 0) == 0);
    }
  }
  SUBCASE("control bytes in the quoted line are not echoed") {
    std::string e = error_of(kHead + "[server]\nport = 70000 # \x1b[2J\n");
    CHECK(!contains(e, "\x1b"));
  }
}

TEST_CASE("config errors: a syntax error on any line of spark.toml names the line, its key and quotes it") {
  std::ifstream in("spark.toml");
  REQUIRE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  std::vector<std::string> lines = split_lines(text.str());
  REQUIRE(lines.size() > 50);
  std::string section;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& original = lines[i];
    std::string broken, key;
    size_t eq = original.find(" = ");
    int column = 1;
    if (!original.empty() && original[0] == '[') {
      section = original.substr(1, original.find(']') - 1);
      broken = "[" + section + " oops]";  // a space inside a bare table name
      column = int(section.size()) + 3;
      key = broken + ": ";  // the table as written
    } else if (!original.empty() && original[0] != '#' && eq != std::string::npos) {
      broken = original.substr(0, eq) + " = = " + original.substr(eq + 3);
      column = int(eq) + 4;
      key = "[" + section + "] " + original.substr(0, eq) + ": ";
    } else {
      broken = "?? " + original;  // not a key, a table or a comment
    }
    std::vector<std::string> copy = lines;
    copy[i] = broken;
    std::string joined;
    for (const auto& l : copy) joined += l + "\n";
    std::string e = error_of(joined, "spark.toml");
    INFO("line ", i + 1, ": ", broken);
    CHECK(contains(e, "invalid TOML"));
    check_points_at(e, "spark.toml", int(i + 1), column, broken);
    if (!key.empty()) CHECK(contains(e, key));
  }
}
