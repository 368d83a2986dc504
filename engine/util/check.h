// check.h — error types and invariant checks shared by the whole code base.
#pragma once
#include <stdexcept>
#include <string>

namespace spark {

// Bad input from a user, a file or a peer: the message must tell the user what to fix.
// Caught at the boundary: the CLI exits 2, HTTP answers 400, the peer link is marked failed.
struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A failure of the environment at run time (out of memory, device error, I/O error):
// the CLI exits 1, HTTP answers 500/503.
struct RuntimeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The peer box closed, reset or stopped answering: the pair is unusable until it
// pairs again. In-flight requests fail; the process goes on.
struct PeerLost : RuntimeError {
  using RuntimeError::RuntimeError;
};

[[noreturn]] void check_failed(const char* expr, const char* file, int line, const std::string& msg);

}  // namespace spark

// A broken internal invariant: a bug, not bad input. Aborts with file:line.
#define SPARK_CHECK(cond, ...)                                                         \
  do {                                                                                 \
    if (!(cond)) ::spark::check_failed(#cond, __FILE__, __LINE__, ::std::string{__VA_ARGS__}); \
  } while (0)
