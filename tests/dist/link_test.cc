// The link timeout (TCPGroupOptions::link_timeout, ENGINE_LINK_TIMEOUT): a peer is taken
// for lost when its machine stops answering TCP, never when its process is only busy. Here
// the peers are live, on this machine, and busy for several link timeouts: they must be
// waited for. That the timeout finds a machine that is really gone is tested on emulated
// machines, whose link can be cut (machine_loss_test.sh, section 3; link_window_test.sh,
// a machine lost while its receive window is closed).
#include <thread>

#include "catch2/catch.hpp"
#include "tensor/ops.h"
#include "tests/dist/ranks.h"
#include "tests/rank_assert.h"

using namespace engine;
using namespace engine::dist;
using namespace engine::testing;
using namespace std::chrono_literals;

namespace {
// Two ranks that act as two machines (so the all-reduce is the TCP ring), with a 1 s link
// timeout; rank 1 sleeps `busy` before each all_reduce of n elements, rank 0 goes straight in.
void all_reduce_with_a_busy_peer(int64_t n, std::chrono::milliseconds busy) {
  run_threads_with(
      2,
      [](int rank, TCPGroupOptions& o) {
        o.host_id = "machine " + std::to_string(rank);
        o.shared_memory = false;
        o.link_timeout = 1s;
      },
      [&](ProcessGroupTCP& g) {
        RANK_REQUIRE(g.all_reduce_algorithm() == "ring");
        Tensor t = full({n}, double(g.rank() + 1));
        if (g.rank() == 1) std::this_thread::sleep_for(busy);
        g.all_reduce(t).wait();
        const float* p = t.data<float>();
        for (int64_t i = 0; i < n; i += n / 16 + 1) RANK_REQUIRE(p[i] == 3.0f);  // 1 + 2
        RANK_REQUIRE(p[n - 1] == 3.0f);
      },
      30s);
}
}  // namespace

TEST_CASE("a peer busy for several link timeouts is waited for, not taken for lost") {
  // Rank 0 sends its half at once and then waits to receive, with nothing outstanding:
  // keepalive probes the idle connection every second, and rank 1's machine answers them.
  SECTION("small: the connection is idle while the peer is busy") { all_reduce_with_a_busy_peer(1024, 4500ms); }
  // 32 MiB to a process that does not read for 9 s: rank 1's receive buffer fills and its
  // window closes. Rank 0's TCP probes the closed window (at most a second apart here,
  // watch_link's cap), and is answered each time. TCP's own bound (TCP_USER_TIMEOUT) would
  // end this connection after 1 s. (Where the kernel lacks the cap, the probes back off
  // past the limit, and only link_silence_ms asking whether anything is outstanding keeps
  // rank 1 from being taken for lost; with the cap this test no longer shows that.)
  SECTION("large: the peer's receive window is closed while it is busy") { all_reduce_with_a_busy_peer(16 << 20, 9s); }
}

// A bad value on one rank only, named by every rank: init_test ("a bad ENGINE_PORT_RANGE or
// ENGINE_LINK_TIMEOUT on one rank ...").
