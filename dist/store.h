// The rendezvous key-value store: how processes that know only the master's address find
// each other. Rank 0 serves it over TCP; every rank (rank 0 included) is a client.
//
//   TCPStore store("127.0.0.1", 29500, /*is_server=*/rank == 0, options);
//   store.set("addr/1", "10.0.0.2:41000");
//   std::string a = store.get("addr/0");         // waits until some rank sets it
//   int64_t n = store.add("arrived", 1);         // atomic counter: returns the new value
//   store.compare_set("leader", "", "rank3");    // set only if absent (or equal to expected)
//   store.claim("node/1", "me");                 // the same, removed when this client disconnects
//
// Every call has a deadline (options.timeout). Clients must present the job's token; the
// server drops connections that do not, and bounds every length it reads before
// allocating. Messages: [u8 command][u32 key length][key][u32 value length][value].
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dist/socket.h"

namespace engine::dist {

struct StoreOptions {
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  std::string token;             // the job's secret; empty accepts any client sending empty
  std::string listen_host = "";  // server: where to listen (default: the given host)
  // Which incarnation of the job's process group the store serves: the launcher's restart
  // count in the high 16 bits, the process groups this process destroyed before in the low
  // 16 (dist.cc, store_generation). A client of another one is told to retry, not served,
  // except across restarts of the same group: join_later_restart below, and a server still
  // forming takes up a client's later restart (store_server.cc, serve_restart_of).
  uint32_t generation = 0;
  // A client may join a store serving the same process group of a later restart of the job
  // (the same low half, a higher high half): its launcher was started afresh, on a machine
  // restarted or replaced while the other machines' launchers restarted the job. Never a
  // store of an earlier restart (a failed attempt's rank 0, about to go) nor of another group.
  bool join_later_restart = false;
  // Who serves the store, as errors name it ("rank 0"; the launchers' store names its own).
  std::string served_by = "rank 0";
};

class TCPStore {
 public:
  // With is_server, listens on host:port (port 0 picks a free one; see port()) before
  // connecting to itself. Clients retry connecting until the timeout.
  TCPStore(const std::string& host, int port, bool is_server, StoreOptions options);
  ~TCPStore();
  TCPStore(const TCPStore&) = delete;
  TCPStore& operator=(const TCPStore&) = delete;

  void set(const std::string& key, const std::string& value);
  // Waits until `key` exists (or the timeout passes), then returns its value.
  std::string get(const std::string& key);
  // Returns the value if present, without waiting.
  bool try_get(const std::string& key, std::string* value);
  int64_t add(const std::string& key, int64_t delta);
  // Sets key to `desired` if its current value is `expected` ("" matches a missing key);
  // returns the value after the call.
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired);
  bool delete_key(const std::string& key);
  // Sets key to `value` if it is absent, and holds it for as long as this client's
  // connection lasts: when the connection closes (the process ended or died), the server
  // removes it. Returns the value after the call (`value` when this client holds it). The
  // launchers hold their node ranks this way (launch_rendezvous.h).
  std::string claim(const std::string& key, const std::string& value);
  // Waits until every key exists.
  void wait(const std::vector<std::string>& keys);
  int64_t num_keys();

  int port() const { return port_; }
  // On the server, once the process group it serves has formed: it stops taking up a later
  // restart of the job (store_server.cc, serve_restart_of), and returns the generation it
  // serves. On a client: the generation it was served at.
  uint32_t seal();
  const std::string& host() const { return host_; }
  // The address of this machine as the server sees it: what peers can reach us at.
  std::string local_address() const;
  std::chrono::milliseconds timeout() const { return options_.timeout; }
  void set_timeout(std::chrono::milliseconds t) { options_.timeout = t; }

 private:
  class Server;
  void connect_to_server();  // with the handshake, retried until options_.timeout
  std::string request(uint8_t cmd, const std::string& key, const std::string& value);

  std::string host_;
  int port_ = 0;
  StoreOptions options_;
  std::unique_ptr<Server> server_;
  Socket sock_;
  std::mutex mu_;  // one request at a time on the client socket
};

// Fails every rank of a group with one reason, for a problem each of them finds while
// starting (a rendezvous, a setting): keeps the first reason given under <prefix>error,
// counts the ranks that have it under <prefix>error_read, and has rank 0, which serves the
// store, wait (5 s at most) until every other rank has, so that they report the reason
// rather than the store's closing. Then throws `why`. `readers`: how many other ranks rank
// 0 waits for, when fewer than world - 1 can come (a timeout: the missing ranks never will).
[[noreturn]] void fail_together(TCPStore& store, const std::string& prefix, int rank, int world, const std::string& why,
                                int readers = -1);

}  // namespace engine::dist
