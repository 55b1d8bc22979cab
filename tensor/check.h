// Errors the engine reports, and the CHECK macro for its own invariants.
//
// A user's mistake (a shape, dtype or device that does not fit) is reported by throwing
// engine::Error whose message starts with the operation's name in brackets:
//
//   throw engine::Error("[matmul] inner dimensions differ: (2,3) @ (4,5)");
//   ENGINE_REQUIRE(a.dim() >= 2, "[matmul] needs 2-D or batched operands, got ", a.dim(), "-D");
//
// ENGINE_CHECK(cond) guards the engine's own invariants: a failure is a bug in the engine, so
// the message carries file, line and the condition. Neither ever calls abort().
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace engine {

// Every error the engine raises on bad input is an engine::Error (a std::runtime_error).
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
template <class... Args>
std::string concat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}
}  // namespace detail

}  // namespace engine

// Throws engine::Error with the concatenated message when `cond` is false.
#define ENGINE_REQUIRE(cond, ...)                                              \
  do {                                                                         \
    if (!(cond)) throw ::engine::Error(::engine::detail::concat(__VA_ARGS__)); \
  } while (0)

// Internal invariant: a failure means a bug in the engine, reported with file and line.
#define ENGINE_CHECK(cond)                                                                              \
  do {                                                                                                  \
    if (!(cond))                                                                                        \
      throw ::engine::Error(                                                                            \
          ::engine::detail::concat("internal check failed at ", __FILE__, ":", __LINE__, ": ", #cond)); \
  } while (0)
