// Internal to the store (store.cc, store_server.cc): the server rank 0 runs, and the wire
// format both sides share. Not part of the public API.
//
// The server is built to stay up under abuse as well as under load: one thread takes
// every connection through its handshake (magic, then the job's token) with poll(), so
// idle or slow strangers cost no thread; only clients with the token get a thread of their
// own. What a client may make it hold is bounded: connections waiting for their handshake
// (the oldest is dropped when a new one would exceed the limit), connections with the
// token, bytes of one value, bytes stored, and bytes of big values being received.
// Whatever is refused is logged to stderr, at most once a second per reason.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dist/socket.h"
#include "dist/store.h"

namespace engine::dist::store_wire {

enum Command : uint8_t { kSet = 1, kGet = 2, kAdd = 3, kCompareSet = 4, kDelete = 5, kNumKeys = 6, kClaim = 7 };
constexpr uint32_t kMagic = 0x44445053;  // "DDPS"
// The handshake's answer: the token matched; it did not; the store is at its limit; or the
// token matched but the client comes from another init_process_group of the job (a rank
// that destroyed its group and initialised again reached the store of the previous one,
// which rank 0 is about to close): the client tries again. kOtherGeneration is followed by
// the generation the store serves (u32), so that a client a restart behind can join it
// (StoreOptions::join_later_restart).
enum Hello : uint8_t { kRefused = 0, kAccepted = 1, kBusy = 2, kOtherGeneration = 3 };

// Whether generation `later` is the same process group of the program as `earlier` (low
// halves: the groups destroyed before) in a later restart of the launcher (high halves):
// a client behind joins such a store, and a store still forming takes up such a client.
inline bool later_restart_of(uint32_t later, uint32_t earlier) {
  return (later & 0xFFFF) == (earlier & 0xFFFF) && (later >> 16) > (earlier >> 16);
}

constexpr uint32_t kMaxKey = 4096;
constexpr uint32_t kMaxValue = 16u << 20;              // one value: addresses and names are bytes, not megabytes
constexpr int64_t kMaxHeldBytes = int64_t(256) << 20;  // stored; and, apart, big values being received
constexpr uint32_t kSmallValue = 64u << 10;            // values this small are read at once, not reserved
constexpr size_t kMaxHandshaking = 256;                // connections that have not yet shown the token
constexpr size_t kMaxClients = 4096;                   // connections with the token (each has a thread)
constexpr std::chrono::seconds kHandshakeTime{5};      // to send magic and token
// The handshake: magic (u32), n (u32), then n bytes: the job's token followed by the
// generation (u32: StoreOptions::generation, the launcher's restart and the process groups
// destroyed before).

// Reads a u32 length and then that many bytes, refusing anything over `limit` before
// allocating (both sides read keys and replies this way).
std::string read_blob(const Socket& s, uint32_t limit, Deadline d, const std::string& peer);

}  // namespace engine::dist::store_wire

namespace engine::dist {

class TCPStore::Server {
 public:
  Server(Listener listener, std::string token, uint32_t generation);
  ~Server();
  // The process group this store serves has formed: from now on a client of a later restart
  // is told to retry (it reached a failed attempt's rank 0), never served. Returns the
  // generation served.
  uint32_t seal();

 private:
  struct Pending;  // a connection in its handshake
  struct Client {  // a connection that showed the token, served by its own thread
    Socket socket;
    std::thread thread;
    std::atomic<bool> finished{false};
    std::vector<std::pair<std::string, std::string>> claimed;  // keys it holds (TCPStore::claim), with mu_
  };

  void accept_loop();
  bool accept_new(std::vector<Pending>& pending);  // false: out of file descriptors
  // Reads what a pending connection sent; returns false when it is done (admitted or dropped).
  bool advance(Pending& p);
  bool serve_restart_of(uint32_t generation);  // serves a client's later restart, if it may
  void admit(Socket s);
  void reap_finished_clients();  // with mu_ held
  void serve(Client& c);
  void release(Client& c);  // removes the keys c claimed, when its connection has ended
  std::string read_value(const Socket& s, Deadline d);
  std::string handle(uint8_t cmd, const std::string& key, const std::string& value, Client& c);
  void log(const std::string& what);  // "[store] what", at most once a second per message

  Listener listener_;
  std::string token_;
  std::atomic<uint32_t> generation_{0};  // changed (serve_restart_of) and sealed with mu_ held
  bool sealed_ = false;
  int64_t clients_gone_ = 0;  // clients whose connection has closed (reaped), with mu_
  std::atomic<bool> stop_{false};
  std::thread accept_thread_;
  std::mutex mu_;  // guards clients_, data_, the byte counts and the log's clock
  std::vector<std::shared_ptr<Client>> clients_;
  std::map<std::string, std::string> data_;
  int64_t stored_bytes_ = 0;     // keys and values stored (at most kMaxHeldBytes)
  int64_t receiving_bytes_ = 0;  // big values being received (at most kMaxHeldBytes)
  std::map<std::string, std::pair<Clock::time_point, int>> last_logged_;  // reason -> (when, suppressed since)
};

}  // namespace engine::dist
