// The rendezvous store: its operations, waiting, timeouts, and refusing strangers.
#include <thread>

#include "catch2/catch.hpp"
#include "tests/rank_assert.h"
#include "dist/store.h"

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
  // Reserve a port, then start the server after the client has begun retrying.
  int port = 0;
  { port = Listener::bind("127.0.0.1", 0).port(); }
  std::unique_ptr<TCPStore> server;
  std::thread starter([&] {
    std::this_thread::sleep_for(200ms);
    server = std::make_unique<TCPStore>("127.0.0.1", port, true, opts());
  });
  TCPStore client("127.0.0.1", port, false, opts());
  starter.join();
  client.set("k", "v");
  RANK_REQUIRE(server->get("k") == "v");
}

TEST_CASE("no server: the error says where it tried and what to check") {
  int port = 0;
  { port = Listener::bind("127.0.0.1", 0).port(); }
  RANK_REQUIRE_THROWS_WITH(TCPStore("127.0.0.1", port, false, opts(300ms)),
                      Catch::Contains("could not connect to the rendezvous store") &&
                          Catch::Contains("127.0.0.1:" + std::to_string(port)));
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
  const uint32_t hello[2] = {0x44445053, 0};
  raw.send_all(hello, sizeof hello, deadline_in(2s), "store");
  uint8_t ok = 0;
  raw.recv_all(&ok, 1, deadline_in(2s), "store");
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
