// The CPU caching allocator: freed large blocks come back for the next request of their
// size class, small ones go to malloc, every block is 64-byte aligned, and a forked child
// can allocate (the cache's lock is not left held across fork).
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "catch2/catch.hpp"
#include "tensor/cpu_allocator.h"
#include "tensor/ops.h"
#include "tests/testing/memory_use.h"

using namespace engine;

namespace {
// The sanitizers' allocators abort on a request this large instead of failing it.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

bool aligned64(const void* p) { return reinterpret_cast<uintptr_t>(p) % 64 == 0; }
}  // namespace

TEST_CASE("every block is 64-byte aligned and holds what is written to it") {
  for (size_t bytes : {size_t(0), size_t(1), size_t(100), size_t(33 * 1024), size_t(1 << 20) + 3}) {
    INFO(bytes << " bytes");
    void* p = cpu_malloc(bytes);
    REQUIRE(p != nullptr);
    REQUIRE(aligned64(p));
    std::memset(p, 0x5a, bytes);
    for (size_t i = 0; i < bytes; i += 997) REQUIRE(static_cast<unsigned char*>(p)[i] == 0x5a);
    cpu_free(p, bytes);
  }
}

TEST_CASE("a freed large block serves the next request of its size class; small ones are not cached") {
  cpu_empty_cache();
  const CpuMemoryStats start = cpu_memory_stats();
  REQUIRE(start.cached_bytes == 0);
  void* small = cpu_malloc(1000);
  cpu_free(small, 1000);
  REQUIRE(cpu_memory_stats().cached_bytes == 0);  // malloc's own caches serve these

  void* a = cpu_malloc(1 << 20);
  cpu_free(a, 1 << 20);
  if (!cpu_cache_enabled()) {  // AddressSanitizer build: nothing kept, so no use after free hides
    REQUIRE(cpu_memory_stats().cached_bytes == 0);
    return;
  }
  REQUIRE(cpu_memory_stats().cached_bytes == size_t(1) << 20);
  // 1 MiB - 100 B rounds up to the same class (four per power of two): the same block.
  void* b = cpu_malloc((1 << 20) - 100);
  REQUIRE(b == a);
  REQUIRE(cpu_memory_stats().cache_hits == start.cache_hits + 1);
  REQUIRE(cpu_memory_stats().cached_bytes == 0);
  // A different class does not take it.
  cpu_free(b, (1 << 20) - 100);
  void* c = cpu_malloc(3 << 20);
  REQUIRE(c != a);
  cpu_free(c, 3 << 20);
  REQUIRE(cpu_memory_stats().cached_bytes == (size_t(1) << 20) + (size_t(3) << 20));
  cpu_empty_cache();
  REQUIRE(cpu_memory_stats().cached_bytes == 0);
}

TEST_CASE("emptying the cache gives its pages back to the system") {
  if (!cpu_cache_enabled()) return;  // AddressSanitizer's allocator keeps freed memory itself
  cpu_empty_cache();
  const size_t bytes = size_t(256) << 20;
  void* p = cpu_malloc(bytes);
  std::memset(p, 1, bytes);  // resident now
  cpu_free(p, bytes);        // cached: still resident
  const int64_t cached_kb = testing::status_kb("VmRSS:");
  cpu_empty_cache();
  const int64_t emptied_kb = testing::status_kb("VmRSS:");
  INFO("RSS " << cached_kb << " KB with the block cached, " << emptied_kb << " KB after emptying");
  REQUIRE(cached_kb - emptied_kb > 200 * 1024);
}

TEST_CASE("a training-shaped loop stops calling malloc after its first step") {
  if (!cpu_cache_enabled()) return;
  auto step = [] {
    Tensor x = randn({64, 784}), w = randn({256, 784});
    Tensor h = relu(matmul(x, w.transpose(0, 1)));
    return sum(h).item();
  };
  step();
  const int64_t before = cpu_memory_stats().system_allocs;
  for (int i = 0; i < 5; ++i) step();
  REQUIRE(cpu_memory_stats().system_allocs == before);
}

TEST_CASE("a forked child can allocate") {
  void* warm = cpu_malloc(1 << 20);
  cpu_free(warm, 1 << 20);
  const pid_t pid = fork();
  if (pid == 0) {
    void* p = cpu_malloc(1 << 20);
    cpu_free(p, 1 << 20);
    _exit(p != nullptr ? 0 : 1);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
}

TEST_CASE("an allocation past the address-space limit (ulimit -v) names the limit") {
  if (kSanitized) return;  // the sanitizers' own mappings
  const pid_t pid = fork();
  if (pid == 0) {  // no Catch2 in the child: it reports through its exit status
    rlimit limit{size_t(1) << 30, size_t(1) << 30};
    if (setrlimit(RLIMIT_AS, &limit) != 0) _exit(2);
    try {
      cpu_malloc(size_t(2) << 30);
    } catch (const Error& e) {
      const std::string what = e.what();
      _exit(what.find("out of memory allocating 2147483648 bytes on cpu (this process may map at most "
                      "1,073,741,824 bytes, ulimit -v, and has ") != std::string::npos &&
                    what.find(" mapped)") != std::string::npos
                ? 0
                : 1);
    }
    _exit(3);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);  // 1: other words; 2: no limit set; 3: no error
}

TEST_CASE("a request the machine cannot meet is an error naming its size, after the cache is returned") {
  if (kSanitized) return;
  void* held = cpu_malloc(1 << 20);
  cpu_free(held, 1 << 20);
  REQUIRE(cpu_memory_stats().cached_bytes > 0);
  const size_t huge = size_t(1) << 60;
  REQUIRE_THROWS_WITH(cpu_malloc(huge), Catch::Contains("out of memory allocating " + std::to_string(huge) + " bytes"));
  REQUIRE(cpu_memory_stats().cached_bytes == 0);  // released before the second try
}
