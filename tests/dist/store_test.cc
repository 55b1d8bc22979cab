// The rendezvous store: its operations, waiting, timeouts, and refusing strangers.
#include <sys/resource.h>

#include <filesystem>
#include <memory>
#include <thread>

#include "catch2/catch.hpp"
#include "dist/store.h"
#include "tensor/check.h"
#include "tests/rank_assert.h"
#include "tests/testing/held_port.h"
#include "tests/testing/memory_use.h"

using namespace engine;
using namespace engine::dist;
using namespace std::chrono_literals;

namespace {
StoreOptions opts(std::chrono::milliseconds t = 5s, std::string token = "") {
  StoreOptions o;
  o.timeout = t;
  o.token = std::move(token);
  return o;
}
}  // namespace

TEST_CASE("set, get, add, compare_set, delete and num_keys") {
  TCPStore server("127.0.0.1", 0, true, opts());
  TCPStore client("127.0.0.1", server.port(), false, opts());
  server.set("a", "1");
  RANK_REQUIRE(client.get("a") == "1");
  std::string v;
  REQUIRE_FALSE(client.try_get("missing", &v));
  RANK_REQUIRE(client.add("n", 5) == 5);
  RANK_REQUIRE(server.add("n", -2) == 3);
  RANK_REQUIRE(client.compare_set("leader", "", "rank1") == "rank1");  // absent: set
  RANK_REQUIRE(server.compare_set("leader", "", "rank0") == "rank1");  // present: unchanged
  RANK_REQUIRE(server.compare_set("leader", "rank1", "rank2") == "rank2");
  RANK_REQUIRE(client.num_keys() == 3);
  RANK_REQUIRE(client.delete_key("a"));
  REQUIRE_FALSE(client.delete_key("a"));
  RANK_REQUIRE(client.num_keys() == 2);
  std::string big(1 << 20, 'x');  // values up to the limit travel whole
  client.set("big", big);
  RANK_REQUIRE(server.get("big") == big);
}

TEST_CASE("get waits for a key another client sets later; wait() for several") {
  TCPStore server("127.0.0.1", 0, true, opts());
  std::thread late([&] {
    TCPStore c("127.0.0.1", server.port(), false, opts());
    std::this_thread::sleep_for(100ms);
    c.set("ready", "yes");
    c.set("also", "yes");
  });
  TCPStore waiter("127.0.0.1", server.port(), false, opts());
  RANK_REQUIRE(waiter.get("ready") == "yes");
  waiter.wait({"ready", "also"});
  late.join();
}

TEST_CASE("a key that never comes times out with an error naming it") {
  TCPStore server("127.0.0.1", 0, true, opts(300ms));
  const auto t0 = std::chrono::steady_clock::now();
  RANK_REQUIRE_THROWS_WITH(server.get("never"), Catch::Contains("timed out") && Catch::Contains("\"never\""));
  RANK_REQUIRE(std::chrono::steady_clock::now() - t0 < 3s);
}

TEST_CASE("clients connect before the server is up, within their timeout") {
  // Hold a port, then start the server on it after the client has begun retrying.
  const int port = engine::testing::held_port();
  std::unique_ptr<TCPStore> server, client;
  std::string server_error, client_error;  // reported, not left to abort the test from a thread
  std::thread starter([&] {
    std::this_thread::sleep_for(200ms);
    try {
      server = std::make_unique<TCPStore>("127.0.0.1", port, true, opts());
    } catch (const std::exception& e) {
      server_error = e.what();
    }
  });
  try {
    client = std::make_unique<TCPStore>("127.0.0.1", port, false, opts());
  } catch (const std::exception& e) {
    client_error = e.what();
  }
  starter.join();
  INFO("server: " << server_error << "; client: " << client_error);
  RANK_REQUIRE((server && client));
  client->set("k", "v");
  RANK_REQUIRE(server->get("k") == "v");
}

TEST_CASE("no server: the error says where it tried and what to check") {
  const int port = engine::testing::held_port();
  RANK_REQUIRE_THROWS_WITH(
      TCPStore("127.0.0.1", port, false, opts(300ms)),
      Catch::Contains("could not connect to the rendezvous store") &&
          Catch::Contains("127.0.0.1:" + std::to_string(port)) &&
          Catch::Contains("(127.0.0.1 is this machine itself: if rank 0 runs on another "
                          "machine, MASTER_ADDR or --master_addr must be that machine's address)"));
}

TEST_CASE("a client with another job's token is refused; the store keeps serving") {
  TCPStore server("127.0.0.1", 0, true, opts(2s, "secret"));
  RANK_REQUIRE_THROWS_WITH(TCPStore("127.0.0.1", server.port(), false, opts(2s, "wrong")),
                           Catch::Contains("job token differs"));
  TCPStore good("127.0.0.1", server.port(), false, opts(2s, "secret"));
  good.set("x", "1");
  RANK_REQUIRE(server.get("x") == "1");
}

TEST_CASE("oversized lengths from the network are refused before allocating") {
  TCPStore server("127.0.0.1", 0, true, opts());
  // A raw client that passes the handshake, then claims a 4 GiB key.
  Socket raw = Socket::connect("127.0.0.1", server.port(), deadline_in(2s), "store");
  const uint32_t hello[3] = {0x44445053, 4, 0};  // magic, 4 bytes: no token, generation 0
  raw.send_all(hello, sizeof hello, deadline_in(2s), "store");
  uint8_t ok = 0;
  raw.recv_all(&ok, 1, deadline_in(2s), "store");
  RANK_REQUIRE(ok == 1);  // accepted: what follows reaches the command reader
  const uint8_t cmd = 1;
  const uint32_t huge = 0xFFFFFFFFu;
  raw.send_all(&cmd, 1, deadline_in(2s), "store");
  raw.send_all(&huge, 4, deadline_in(2s), "store");
  // The server drops that connection...
  char byte;
  RANK_REQUIRE_THROWS_WITH(raw.recv_all(&byte, 1, deadline_in(2s), "store"), Catch::Contains("closed"));
  // ...and goes on serving everyone else.
  TCPStore client("127.0.0.1", server.port(), false, opts());
  client.set("still", "here");
  RANK_REQUIRE(server.get("still") == "here");
}

namespace {
int threads_now() {
  int n = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/proc/self/task", ec), end; !ec && it != end; it.increment(ec)) ++n;
  return n;
}

long rss_kb() { return long(engine::testing::status_kb("VmRSS:")); }

// A raw connection that has passed the handshake with `token`.
Socket handshaken(int port, const std::string& token) {
  Socket raw = Socket::connect("127.0.0.1", port, deadline_in(2s), "store");
  const uint32_t hello[2] = {0x44445053, uint32_t(token.size() + 4)}, generation = 0;
  raw.send_all(hello, sizeof hello, deadline_in(2s), "store");
  raw.send_all(token.data(), token.size(), deadline_in(2s), "store");
  raw.send_all(&generation, 4, deadline_in(2s), "store");
  uint8_t ok = 0;
  raw.recv_all(&ok, 1, deadline_in(2s), "store");
  RANK_REQUIRE(ok == 1);
  return raw;
}
}  // namespace

TEST_CASE("hundreds of idle connections cost the store no threads, and the job's clients are served at once") {
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  lim.rlim_cur = lim.rlim_max;
  setrlimit(RLIMIT_NOFILE, &lim);
  TCPStore server("127.0.0.1", 0, true, opts(5s, "secret"));
  const int before = threads_now();
  std::vector<Socket> idle;
  for (int i = 0; i < 600; ++i) idle.push_back(Socket::connect("127.0.0.1", server.port(), deadline_in(2s), "store"));
  std::this_thread::sleep_for(200ms);         // the server has seen them all
  RANK_REQUIRE(threads_now() - before <= 2);  // one thread handshakes them all
  const auto t0 = std::chrono::steady_clock::now();
  TCPStore client("127.0.0.1", server.port(), false, opts(5s, "secret"));
  client.set("k", "v");
  RANK_REQUIRE(server.get("k") == "v");
  RANK_REQUIRE(std::chrono::steady_clock::now() - t0 < 1s);
}

TEST_CASE("clients announcing huge values cannot make the store hold more than its limit") {
  TCPStore server("127.0.0.1", 0, true, opts(5s, "secret"));
  const long rss0 = rss_kb();
  // 24 clients with the token each announce a 16 MB value (the most one value may be)
  // and send 64 KB of it: the store may count 256 MB against its limit, but holds only
  // what arrived, and refuses the clients past the limit.
  std::vector<Socket> greedy;
  const std::string chunk(64 << 10, 'x');
  for (int i = 0; i < 24; ++i) {
    Socket s = handshaken(server.port(), "secret");
    const uint8_t cmd = 1;
    const uint32_t key_len = 1, value_len = 16u << 20;
    s.send_all(&cmd, 1, deadline_in(2s), "store");
    s.send_all(&key_len, 4, deadline_in(2s), "store");
    s.send_all("k", 1, deadline_in(2s), "store");
    s.send_all(&value_len, 4, deadline_in(2s), "store");
    try {
      s.send_all(chunk.data(), chunk.size(), deadline_in(2s), "store");
    } catch (const Error&) {  // refused already
    }
    greedy.push_back(std::move(s));
  }
  std::this_thread::sleep_for(300ms);
  int dropped = 0;
  for (auto& s : greedy) {
    char byte;
    try {
      if (wait_fd(s.fd(), false, deadline_in(10ms))) s.recv_all(&byte, 1, deadline_in(10ms), "store");
    } catch (const Error&) {
      ++dropped;
    }
  }
  RANK_REQUIRE(dropped >= 8);                 // 16 x 16 MB reach the limit
  RANK_REQUIRE(rss_kb() - rss0 < 64 * 1024);  // not 24 x 16 MB = 384 MB
  TCPStore client("127.0.0.1", server.port(), false, opts(5s, "secret"));
  client.set("small", "fits");
  RANK_REQUIRE(server.get("small") == "fits");
  // One value over the limit for a single value is refused outright.
  Socket big = handshaken(server.port(), "secret");
  const uint8_t cmd = 1;
  const uint32_t key_len = 1, value_len = 64u << 20;
  big.send_all(&cmd, 1, deadline_in(2s), "store");
  big.send_all(&key_len, 4, deadline_in(2s), "store");
  big.send_all("k", 1, deadline_in(2s), "store");
  big.send_all(&value_len, 4, deadline_in(2s), "store");
  char byte;
  RANK_REQUIRE_THROWS_WITH(big.recv_all(&byte, 1, deadline_in(2s), "store"), Catch::Contains("closed"));
}

TEST_CASE("a store that closes during the handshake is reported as such, not as another job's token") {
  Listener l = Listener::bind("127.0.0.1", 0);
  std::thread closer([&] {
    Socket s = l.accept(deadline_in(5s));
    char buf[16];
    s.recv_all(buf, 8, deadline_in(5s), "client");  // magic and an empty token's length
  });                                               // then closes, as a rank 0 that failed would
  RANK_REQUIRE_THROWS_WITH(
      TCPStore("127.0.0.1", l.port(), false, opts(5s)),
      Catch::Contains("closed the connection during the handshake") && !Catch::Contains("token differs"));
  closer.join();
}

TEST_CASE("another program on the store's port is named at once, not waited on as a busy store") {
  for (uint32_t generation : {0u, 1u}) {  // 1: a restarted rank, which retries a closing store
    INFO("generation " << generation);
    Listener l = Listener::bind("127.0.0.1", 0);
    std::thread ssh([&] {  // an SSH server greets every connection first
      Socket s = l.accept(deadline_in(5s));
      const std::string banner = "SSH-2.0-OpenSSH_9.2p1\r\n";
      s.send_all(banner.data(), banner.size(), deadline_in(5s), "client");
      char buf[64];
      try {
        s.recv_all(buf, sizeof buf, deadline_in(5s), "client");
      } catch (const Error&) {}  // the client hangs up
    });
    StoreOptions o = opts(5s);
    o.generation = generation;
    const auto t0 = std::chrono::steady_clock::now();
    RANK_REQUIRE_THROWS_WITH(
        TCPStore("127.0.0.1", l.port(), false, o),
        Catch::Contains("is not a rendezvous store: it answered the handshake with byte 0x53 ('S')"));
    RANK_REQUIRE(std::chrono::steady_clock::now() - t0 < 2s);  // not the 5 s timeout
    ssh.join();
  }
}

TEST_CASE("a program that accepts and never answers the handshake is named as such at the timeout") {
  Listener l = Listener::bind("127.0.0.1", 0);
  std::thread silent([&] {
    Socket s = l.accept(deadline_in(5s));
    char buf[64];
    try {
      s.recv_all(buf, sizeof buf, deadline_in(5s), "client");
    } catch (const Error&) {}
  });
  RANK_REQUIRE_THROWS_WITH(TCPStore("127.0.0.1", l.port(), false, opts(500ms)),
                           Catch::Contains("accepted the connection but never answered the store's handshake") &&
                               !Catch::Contains("closed the connection"));
  silent.join();
}

TEST_CASE("a client from another init_process_group of the job is told to retry, then named at the deadline") {
  StoreOptions later = opts();
  later.generation = 1;  // the server of this process's second group...
  TCPStore server("127.0.0.1", 0, true, later);
  StoreOptions earlier = opts();
  earlier.timeout = 300ms;  // ...reached by a client that has destroyed none
  const auto t0 = std::chrono::steady_clock::now();
  RANK_REQUIRE_THROWS_WITH(TCPStore("127.0.0.1", server.port(), false, earlier),
                           Catch::Contains("kept serving another process group of this job (the launcher's "
                                           "restart 0 after 1 destroyed process group(s)) than this process's (the "
                                           "launcher's restart 0 after 0 destroyed process group(s))"));
  RANK_REQUIRE(std::chrono::steady_clock::now() - t0 >= 250ms);  // it retried until its deadline
  TCPStore same("127.0.0.1", server.port(), false, later);       // the same generation is served
  same.set("k", "v");
  RANK_REQUIRE(server.get("k") == "v");
}

TEST_CASE("a store still forming takes up a later restart of the job; a formed one, or one a client left, does not") {
  // The store's machine was restarted afresh (its launcher at restart 0) while the others'
  // launchers restarted the job: their ranks come at restart 2.
  auto at = [](uint32_t restart, uint32_t destroyed, std::chrono::milliseconds t = 5s) {
    StoreOptions o = opts(t);
    o.generation = restart << 16 | destroyed;
    return o;
  };
  {
    TCPStore server("127.0.0.1", 0, true, at(0, 0));
    TCPStore later("127.0.0.1", server.port(), false, at(2, 0));  // served: the group is still forming
    later.set("k", "v");
    RANK_REQUIRE(server.get("k") == "v");
    RANK_REQUIRE(server.seal() == 2u << 16);
    RANK_REQUIRE_THROWS_WITH(TCPStore("127.0.0.1", server.port(), false, at(0, 0, 300ms)),
                             Catch::Contains("the launcher's restart 2 after 0"));  // now a rank behind is told
  }
  {  // formed (sealed): a later restart meeting it met a failed attempt's rank 0, and waits
    TCPStore server("127.0.0.1", 0, true, at(0, 0));
    RANK_REQUIRE(server.seal() == 0u);
    RANK_REQUIRE_THROWS_WITH(TCPStore("127.0.0.1", server.port(), false, at(2, 0, 300ms)),
                             Catch::Contains("(the launcher's restart 0 after 0 destroyed process group(s)) than this "
                                             "process's (the launcher's restart 2 after 0") &&
                                 Catch::Contains("at an earlier restart than this one"));
  }
  {  // a client of the store's own restart has gone (it may have left keys of that attempt)
    TCPStore server("127.0.0.1", 0, true, at(0, 0));
    { TCPStore gone("127.0.0.1", server.port(), false, at(0, 0)); }
    RANK_REQUIRE_THROWS_WITH(TCPStore("127.0.0.1", server.port(), false, at(2, 0, 300ms)),
                             Catch::Contains("kept serving another process group"));
  }
  {  // another process group of the program (one more destroyed before) is never taken up
    TCPStore server("127.0.0.1", 0, true, at(0, 0));
    RANK_REQUIRE_THROWS_WITH(TCPStore("127.0.0.1", server.port(), false, at(2, 1, 300ms)),
                             Catch::Contains("kept serving another process group"));
    RANK_REQUIRE(server.seal() == 0u);
  }
}

TEST_CASE("a claimed key is held while its client is connected, and freed when it disconnects") {
  TCPStore server("127.0.0.1", 0, true, opts());
  {
    TCPStore a("127.0.0.1", server.port(), false, opts());
    RANK_REQUIRE(a.claim("node/1", "a") == "a");
    TCPStore b("127.0.0.1", server.port(), false, opts());
    RANK_REQUIRE(b.claim("node/1", "b") == "a");  // held by a
    RANK_REQUIRE(b.claim("node/2", "b") == "b");
    server.set("other", "kept");
  }  // both disconnect: what they claimed goes, the rest stays
  for (int i = 0; i < 200 && server.num_keys() > 1; ++i) std::this_thread::sleep_for(10ms);
  std::string v;
  RANK_REQUIRE(!server.try_get("node/1", &v));
  RANK_REQUIRE(!server.try_get("node/2", &v));
  RANK_REQUIRE(server.get("other") == "kept");
  TCPStore c("127.0.0.1", server.port(), false, opts());
  RANK_REQUIRE(c.claim("node/1", "c") == "c");  // free again
  // A key set over a claimed one is not removed when the claimant goes.
  {
    TCPStore d("127.0.0.1", server.port(), false, opts());
    RANK_REQUIRE(d.claim("node/3", "d") == "d");
    server.set("node/3", "set since");
  }
  std::this_thread::sleep_for(200ms);
  RANK_REQUIRE(server.get("node/3") == "set since");
}

TEST_CASE("fail_together: a rank whose store closes as it reports its reading throws its reason, not the closing") {
  // Rank 0 exits as soon as it counts the last reading, maybe before the reply to that
  // count is sent: the rank that counted has its reason and reports it.
  auto server = std::make_unique<TCPStore>("127.0.0.1", 0, true, opts());
  TCPStore rank1("127.0.0.1", server->port(), false, opts(1s));
  server.reset();  // the store is gone
  REQUIRE_THROWS_WITH(fail_together(rank1, "x/", 1, 2, "the reason"), "the reason");
}
