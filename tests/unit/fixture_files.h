// fixture_files.h — where the unit tests find the real tokenizer files: the plain copy of
// tests/fixtures (whose large files are stored xz-compressed) that tests/gen/fixture_files.py
// makes in build/fixtures; `make` keeps it up to date before any suite runs.
#pragma once
#include <cstdlib>
#include <string>

namespace spark::testing {

// SPARKD_FIXTURES when set (make sets it to build/fixtures' absolute path), else
// build/fixtures relative to the repository root, where the tests run.
inline std::string fixtures_dir() {
  const char* env = std::getenv("SPARKD_FIXTURES");
  return env && *env ? env : "build/fixtures";
}

// What to run when a fixture file is missing.
inline std::string fixtures_hint() {
  return "(plain copies of tests/fixtures: make build/fixtures/.stamp, or python3 tests/gen/fixture_files.py)";
}

}  // namespace spark::testing
