// Assertions for code that runs on rank threads. Catch2 2.x is not thread-safe: an
// assertion on another thread races on its counters and reporter (ThreadSanitizer sees
// it). On the main thread these are Catch's own macros; on any other thread they evaluate
// the condition without touching Catch and throw on failure, naming the file, the line
// and the expression. run_threads (tests/dist/ranks.h) rethrows that on the main thread,
// where Catch reports it.
//
//   run_threads(2, [&](ProcessGroupTCP& g) { RANK_REQUIRE(g.size() == 2); });
#pragma once

#include <stdexcept>
#include <string>

#include "catch2/catch.hpp"

namespace engine::testing {

bool on_main_thread();  // defined in tests/catch2_main.cc

[[noreturn]] inline void rank_failure(const char* file, int line, const std::string& what) {
  throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": on a rank thread, " + what);
}

}  // namespace engine::testing

// CATCH_MACRO on the main thread; elsewhere the condition, and a throw if it is false.
#define RANK_ASSERT_(CATCH_MACRO, ...)                                                               \
  do {                                                                                               \
    if (::engine::testing::on_main_thread()) {                                                       \
      CATCH_MACRO(__VA_ARGS__);                                                                      \
    } else if (!(__VA_ARGS__)) {                                                                     \
      ::engine::testing::rank_failure(__FILE__, __LINE__, #CATCH_MACRO "(" #__VA_ARGS__ ") failed"); \
    }                                                                                                \
  } while (0)

#define RANK_REQUIRE(...) RANK_ASSERT_(REQUIRE, __VA_ARGS__)
// On a rank thread a failed CHECK stops that rank, like REQUIRE.
#define RANK_CHECK(...) RANK_ASSERT_(CHECK, __VA_ARGS__)

#define RANK_REQUIRE_THAT(value, matcher)                                                                       \
  do {                                                                                                          \
    if (::engine::testing::on_main_thread()) {                                                                  \
      REQUIRE_THAT(value, matcher);                                                                             \
    } else {                                                                                                    \
      const std::string rank_value_ = (value);                                                                  \
      if (!(matcher).match(rank_value_))                                                                        \
        ::engine::testing::rank_failure(__FILE__, __LINE__, "\"" + rank_value_ + "\" " + (matcher).describe()); \
    }                                                                                                           \
  } while (0)

#define RANK_REQUIRE_THROWS_WITH(expr, matcher)                                                                    \
  do {                                                                                                             \
    if (::engine::testing::on_main_thread()) {                                                                     \
      REQUIRE_THROWS_WITH(expr, matcher);                                                                          \
    } else {                                                                                                       \
      std::string rank_message_;                                                                                   \
      bool rank_threw_ = false;                                                                                    \
      try {                                                                                                        \
        static_cast<void>(expr);                                                                                   \
      } catch (const std::exception& e) {                                                                          \
        rank_threw_ = true;                                                                                        \
        rank_message_ = e.what();                                                                                  \
      }                                                                                                            \
      if (!rank_threw_) ::engine::testing::rank_failure(__FILE__, __LINE__, #expr " did not throw");               \
      if (!(matcher).match(rank_message_))                                                                         \
        ::engine::testing::rank_failure(                                                                           \
            __FILE__, __LINE__, #expr " threw \"" + rank_message_ + "\", which does not " + (matcher).describe()); \
    }                                                                                                              \
  } while (0)
