// test_hooks.h — fault injection for tests, compiled in only by a test build.
//
// `make` builds $(BUILD)/sparkd with SPARKD_TEST_HOOKS=0: every hook below is an empty
// inline function and the binary has no fault switch. `make test` also builds
// $(BUILD)/test-hooks/sparkd with SPARKD_TEST_HOOKS=1, where the hooks read environment
// variables, so integration tests can stage failures a real box meets rarely (a wedged
// engine, a slow model load) without waiting minutes for them.
#pragma once

#include <chrono>
#include <cstdint>

#ifndef SPARKD_TEST_HOOKS
#define SPARKD_TEST_HOOKS 0
#endif

namespace spark::test_hooks {

#if SPARKD_TEST_HOOKS
// The engine loop's turn: while the file named by $SPARKD_TEST_WEDGE_FILE exists, it blocks
// here, as an engine stuck in a kernel or a lock would.
void engine_turn();
// Before the model loads: blocks while the file named by $SPARKD_TEST_LOAD_HOLD_FILE exists,
// as a load from a slow disk would.
void model_load();
// How long the engine loop may stand still before it counts as wedged:
// $SPARKD_TEST_STALL_LIMIT_S seconds when set, else `normal`.
std::chrono::steady_clock::duration engine_stall_limit(std::chrono::steady_clock::duration normal);
// The token a sequence emits as its output token number `index` (0-based): the index-th id
// of $SPARKD_TEST_FORCED_TOKENS (comma-separated) when set and long enough, else `sampled`.
// Lets a test put exact token ids, special tokens included, through the whole output path.
int32_t forced_token(int64_t index, int32_t sampled);
#else
inline void engine_turn() {}
inline void model_load() {}
inline std::chrono::steady_clock::duration engine_stall_limit(std::chrono::steady_clock::duration normal) {
  return normal;
}
inline int32_t forced_token(int64_t, int32_t sampled) { return sampled; }
#endif

}  // namespace spark::test_hooks
