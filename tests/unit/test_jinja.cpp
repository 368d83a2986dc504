// test_jinja.cpp — the Jinja interpreter against expectations produced by Python jinja2
// (tests/golden/templates/jinja_semantics.json), plus hostile templates that must stop
// with a clean TemplateError.
#include <doctest/doctest.h>

#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "engine/template/jinja/template.h"
#include "engine/template/jinja/value.h"

using spark::TemplateError;
using spark::jinja::Limits;
using spark::jinja::Template;
using ojson = nlohmann::ordered_json;

namespace {

ojson load_golden(const std::string& name) {
  std::ifstream f("tests/golden/templates/" + name);
  REQUIRE_MESSAGE(f.good(), "missing tests/golden/templates/" << name << " (run from the repository root)");
  std::stringstream ss;
  ss << f.rdbuf();
  return ojson::parse(ss.str());
}

std::string render(const std::string& source, const ojson& vars = ojson::object(), Limits limits = {}) {
  return Template(source, limits).render(vars);
}

}  // namespace

TEST_CASE("jinja semantics match jinja2 (golden from the reference)") {
  ojson golden = load_golden("jinja_semantics.json");
  int rendered = 0, refused = 0;
  for (const auto& c : golden["cases"]) {
    std::string source = c["template"].get<std::string>();
    CAPTURE(source);
    if (c.contains("expected")) {
      std::string got;
      try {
        got = render(source, c["variables"]);
      } catch (const std::exception& e) {
        FAIL_CHECK("threw: " << e.what());
        continue;
      }
      CHECK(got == c["expected"].get<std::string>());
      ++rendered;
    } else {
      std::string reference_error = c["error"].get<std::string>();
      CAPTURE(reference_error);
      CHECK_THROWS_AS(render(source, c["variables"]), TemplateError);
      ++refused;
    }
  }
  CHECK(rendered >= 75);
  CHECK(refused > 10);
}

TEST_CASE("jinja raise_exception carries the template's message") {
  try {
    render("{% if x %}{{ raise_exception('Conversation roles must alternate user/assistant') }}{% endif %}",
           ojson{{"x", true}});
    FAIL("expected a TemplateError");
  } catch (const TemplateError& e) {
    CHECK(std::string(e.what()).find("Conversation roles must alternate user/assistant") != std::string::npos);
    CHECK(std::string(e.what()).find("line 1") != std::string::npos);
  }
}

TEST_CASE("jinja errors are InputErrors with the line") {
  try {
    render("line one\n{{ 1 + }}");
    FAIL("expected a TemplateError");
  } catch (const spark::InputError& e) {
    CHECK(std::string(e.what()).find("line 2") != std::string::npos);
  }
}

TEST_CASE("jinja dict views print and fail as Python's do") {
  const ojson d = {{"d", {{"k", 1}}}};
  CHECK(render("{{ d.items() }} {{ d.keys() }} {{ d.values() }}", d) ==
        "dict_items([('k', 1)]) dict_keys(['k']) dict_values([1])");
  CHECK(render("{{ d.keys() | list }} {{ d.items() | length }} {{ 'k' in d.keys() }} {{ d.keys() is sequence }}", d) ==
        "['k'] 1 True False");
  try {
    render("{{ d.keys().items() }}", d);
    FAIL("expected a TemplateError");
  } catch (const TemplateError& e) {
    CHECK(std::string(e.what()).find("'dict_keys object' has no attribute 'items'") != std::string::npos);
  }
  CHECK(render("{{ d.keys().x is defined }}", d) == "False");
}

TEST_CASE("jinja scoping: a name assigned in a scope is that scope's own from its start") {
  const ojson a = {{"a", 5}};
  // Assigned at the top level after a loop reads it: the loop sees the (undefined) local.
  CHECK(render("{% for i in [1] %}[{{ a }}]{% endfor %}{% set a = 2 %}{{ a }}", a) == "[]2");
  // Read before assigned in the same loop body: the outer value, as jinja2 resolves it first.
  CHECK(render("{% for i in [1] %}{{ a }}{% set a = 3 %}{{ a }}{% endfor %}{{ a }}", a) == "535");
  // Assigned inside an `if` branch: starts from the outer value.
  CHECK(render("{% for i in [1] %}{% if i > 1 %}{% set a = 3 %}{% endif %}{{ a }}{% endfor %}", a) == "5");
  // A loop's else has its own scope without the loop variable, and runs when no pass
  // reached the end of the body.
  CHECK(render("{% for x in [1, 2] %}{% continue %}{% else %}E{{ x is defined }}{% endfor %}", a) == "EFalse");
  CHECK(render("{% for x in [1, 2] %}{% if x == 2 %}{% break %}{% endif %}{% else %}E{% endfor %}", a) == "");
  CHECK(render("{% for x in [] %}{% else %}{% set a = 1 %}{% endfor %}{{ a }}", a) == "5");
}

TEST_CASE("jinja folds constant expressions as jinja2's compiler does") {
  // Folding slices through getitem, which makes an undefined of what run time raises on.
  CHECK(render("[{{ (none)[0:1] }}][{{ (none)[0:1] | upper }}][{{ (1)[0:1] is defined }}]") == "[][][False]");
  CHECK(render("{% set v = (none)[0:1] | string %}[{{ v }}]") == "[]");
  // Not constant (a variable, or an undefined result outside an output): run time's error.
  CHECK_THROWS_AS(render("{{ (none)[0:1] ~ a }}", ojson{{"a", 1}}), TemplateError);
  CHECK_THROWS_AS(render("{% if (none)[0:1] %}{% endif %}"), TemplateError);
  CHECK_THROWS_AS(render("{{ x[0:1] }}", ojson{{"x", nullptr}}), TemplateError);
  CHECK(render("{{ 'abc'[1:] }}{{ [1, 2, 3][::-1] }}") == "bc[3, 2, 1]");
}

TEST_CASE("jinja strftime_now formats the local time") {
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char year[16];
  std::strftime(year, sizeof year, "%Y", &local);
  CHECK(render("{{ strftime_now('%Y') }}") == year);
}

TEST_CASE("jinja hostile: self-recursive macro stops at the depth limit") {
  try {
    render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
    FAIL("expected a TemplateError");
  } catch (const TemplateError& e) {
    CHECK(std::string(e.what()).find("nested too deeply") != std::string::npos);
  }
  // Mutual recursion too.
  CHECK_THROWS_AS(render("{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}"),
                  TemplateError);
  // A recursive loop that recurses on itself forever.
  CHECK_THROWS_AS(render("{% for x in [[1]] recursive %}{{ loop([x]) }}{% endfor %}"), TemplateError);
}

TEST_CASE("jinja hostile: deep nesting is refused by the parser") {
  CHECK_THROWS_AS(render("{{ " + std::string(20000, '(') + "1" + std::string(20000, ')') + " }}"), TemplateError);
  CHECK_THROWS_AS(render("{{ " + std::string(20000, '[') + std::string(20000, ']') + " }}"), TemplateError);
  CHECK_THROWS_AS(render("{{ " + std::string(50000, '-') + "1 }}"), TemplateError);
  std::string nested_ifs;
  for (int i = 0; i < 5000; ++i) nested_ifs += "{% if true %}";
  for (int i = 0; i < 5000; ++i) nested_ifs += "{% endif %}";
  CHECK_THROWS_AS(render(nested_ifs), TemplateError);
  std::string nots = "{{ ";
  for (int i = 0; i < 20000; ++i) nots += "not ";
  CHECK_THROWS_AS(render(nots + "x }}"), TemplateError);
  // Moderate nesting still works.
  CHECK(render("{{ ((((((((((1)))))))))) }}") == "1");
}

TEST_CASE("jinja hostile: huge loops stop at the work budget") {
  Limits small;
  small.max_steps = 200000;
  try {
    render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", ojson::object(), small);
    FAIL("expected a TemplateError");
  } catch (const TemplateError& e) {
    CHECK(std::string(e.what()).find("work budget") != std::string::npos);
  }
  // With the default budget too (a template that never ends would otherwise hang a request).
  CHECK_THROWS_AS(render("{% for i in range(100000) %}{% for j in range(100000) %}{{ j }}{% endfor %}{% endfor %}"),
                  TemplateError);
  CHECK_THROWS_AS(render("{{ range(100001) | length }}"), TemplateError);
}

TEST_CASE("jinja hostile: huge strings and outputs stop at the size limits") {
  try {
    render("{{ 'a' * 10000000000 }}");
    FAIL("expected a TemplateError");
  } catch (const TemplateError& e) {
    CHECK(std::string(e.what()).find("limit") != std::string::npos);
  }
  CHECK_THROWS_AS(render("{{ 'abc' * 9223372036854775807 }}"), TemplateError);
  CHECK_THROWS_AS(render("{{ [1, 2] * 9000000000000000000 }}"), TemplateError);
  CHECK_THROWS_AS(render("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"),
                  TemplateError);
  Limits small;
  small.max_output_bytes = 1000;
  CHECK_THROWS_AS(render("{% for i in range(1000) %}xxxxxxxxxx{% endfor %}", ojson::object(), small), TemplateError);
  CHECK_THROWS_AS(render("{{ 2 ** 64 }}"), TemplateError);  // 64-bit integers: refused, never wrapped
}

TEST_CASE("jinja hostile: deeply nested input data is refused") {
  ojson deep = ojson::array();
  ojson* cur = &deep;
  for (int i = 0; i < 2000; ++i) {
    cur->push_back(ojson::array());
    cur = &(*cur)[0];
  }
  CHECK_THROWS_AS(render("{{ x }}", ojson{{"x", deep}}), TemplateError);
}

TEST_CASE("jinja renders a long conversation within budget") {
  ojson messages = ojson::array();
  for (int i = 0; i < 5000; ++i) messages.push_back({{"role", i % 2 ? "assistant" : "user"}, {"content", "m" + std::to_string(i)}});
  std::string out = render("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}", ojson{{"messages", messages}});
  CHECK(out.rfind("<assistant>m4999") != std::string::npos);
}

TEST_CASE("jinja hostile: self-referencing namespaces and huge lists end cleanly") {
  // A namespace made to hold itself renders, and is emptied when the render ends.
  CHECK(render("{% set ns = namespace() %}{% set ns.x = [ns] %}{{ ns.x | length }}{{ ns == ns.x[0] }}") == "1True");
  // Printed as Python prints a dict inside itself.
  CHECK(render("{% set ns = namespace() %}{% set ns.x = [ns] %}{{ ns }}") == "<Namespace {'x': [<Namespace {...}>]}>");
  // Nesting values ever deeper stops at the nesting limit instead of recursing on free.
  CHECK_THROWS_AS(render("{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}"),
                  TemplateError);
  // A million references to one long string: cheap to build, refused when printed.
  CHECK_THROWS_AS(render("{% set s = 'a' * 1000000 %}{{ [s] * 1000 }}"), TemplateError);
  // Only namespace() objects take attributes, as in jinja2.
  CHECK_THROWS_AS(render("{% for i in [1] %}{% set loop.x = loop %}{% endfor %}"), TemplateError);
}
