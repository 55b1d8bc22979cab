#include "dist/store.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdio>
#include <cstring>

#include "dist/addresses.h"
#include "dist/store_server.h"
#include "tensor/check.h"

namespace engine::dist {

namespace {

using namespace store_wire;

void put_u32(std::string& out, uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); }

}  // namespace

TCPStore::TCPStore(const std::string& host, int port, bool is_server, StoreOptions options)
    : host_(host), port_(port), options_(std::move(options)) {
  ENGINE_REQUIRE(options_.token.size() <= kMaxKey, "[store] the job token (ENGINE_JOB_TOKEN or --job_token) is ",
                 options_.token.size(), " bytes; at most ", kMaxKey, " are allowed");
  watch_for_stops();  // a job stopped and continued as a whole keeps its deadlines (stop_clock.h)
  if (is_server) {
    Listener l = Listener::bind(options_.listen_host.empty() ? host : options_.listen_host, port);
    port_ = l.port();
    server_ = std::make_unique<Server>(std::move(l), options_.token, options_.generation);
  }
  connect_to_server();
}

namespace {

// What one connection's handshake met. The store may ask to be tried again (kBusy: at its
// connection limit; kOtherGeneration: still serving a process group this process has
// destroyed, which rank 0 is closing); a connection cut off or left unanswered is a store
// closing or frozen, or another program on the port; any other first byte is another
// program's (an SSH server's "SSH-2.0-...", a web server's "HTTP/1.1 400").
struct Handshake {
  enum Outcome { kDone, kRetry, kCutOff, kUnanswered } outcome;
  uint8_t answer = 0;
  std::string error;    // the socket's, for kCutOff and kUnanswered
  uint32_t served = 0;  // kOtherGeneration: the generation the store serves
};

Handshake handshake(const Socket& sock, const StoreOptions& o, Deadline d, const std::string& peer) {
  std::string hello;
  put_u32(hello, kMagic);
  put_u32(hello, uint32_t(o.token.size() + 4));
  hello += o.token;
  put_u32(hello, o.generation);
  uint8_t answer = 0;
  uint32_t served = 0;
  try {
    sock.send_all(hello.data(), hello.size(), d, peer);
    sock.recv_all(&answer, 1, d, peer);
    if (answer == kOtherGeneration) sock.recv_all(&served, 4, d, peer);
  } catch (const TimedOut& e) {
    return {Handshake::kUnanswered, 0, e.what()};
  } catch (const Error& e) {
    return {Handshake::kCutOff, 0, e.what()};
  }
  return {answer == kBusy || answer == kOtherGeneration ? Handshake::kRetry : Handshake::kDone, answer, "", served};
}

std::string byte_shown(uint8_t b) {
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02x", unsigned(b));
  return b >= 32 && b < 127 ? std::string(hex) + " ('" + char(b) + "')" : std::string(hex);
}

}  // namespace

void TCPStore::connect_to_server() {
  const Deadline d = deadline_in(options_.timeout);
  const std::string peer = "the rendezvous store (" + options_.served_by + ")",
                    where = host_ + ":" + std::to_string(port_);
  // At the deadline, what the attempts met before is the error to report, whatever the
  // last attempt met.
  uint8_t asked_to_retry = kAccepted;
  uint32_t served = 0;  // the generation the store said it serves
  bool cut_off = false;
  const auto gave_up = [&](const std::string& last) {
    if (asked_to_retry == kOtherGeneration) {
      const auto incarnation = [](uint32_t g) {
        return "the launcher's restart " + std::to_string(g >> 16) + " after " + std::to_string(g & 0xFFFF) +
               " destroyed process group(s)";
      };
      std::string why = "[store] the store at " + where + " kept serving another process group of this job (" +
                        incarnation(served) + ") than this process's (" + incarnation(options_.generation) +
                        "): every rank must call destroy_process_group() and init_process_group() alike, and on "
                        "several machines every launcher must restart the job together (the same --max_restarts, "
                        "no rank left running)";
      if ((served >> 16) < (options_.generation >> 16))
        why +=
            ". The store's launcher is at an earlier restart than this one: if its machine was restarted and its "
            "launcher started afresh, stop every machine's launcher and start them all again (a program that "
            "saves its state resumes from it)";
      return Error(why);
    }
    if (asked_to_retry == kBusy) return Error("[store] the store at " + where + " stayed at its connection limit");
    if (cut_off)
      return Error("[store] the store at " + where +
                   " closed the connection during the handshake: " + options_.served_by +
                   " has probably failed or is stopping (look for its error), or another job that held this port "
                   "has just ended; " +
                   last);
    // A loopback address reaches only this machine: the usual slip on a second machine is
    // leaving --master_addr at its default.
    if (loopback_here(host_) && last.find("could not connect") != std::string::npos)
      return Error(last + " (" + host_ +
                   " is this machine itself: if rank 0 runs on another machine, MASTER_ADDR or --master_addr must be "
                   "that machine's address)");
    return Error(last);
  };
  while (true) {
    try {
      sock_ = Socket::connect(host_, port_, d, peer);
    } catch (const Error& e) {
      throw gave_up(e.what());
    }
    const Handshake h = handshake(sock_, options_, d, peer);
    switch (h.outcome) {
      case Handshake::kDone:
        if (h.answer == kAccepted) return;
        if (h.answer == kRefused)
          throw Error(
              "[store] the store at " + where +
              " refused this process: its job token differs (another job is using this MASTER_PORT, or the machines"
              " were given different --job_token or ENGINE_JOB_TOKEN: give every machine the same)");
        throw Error("[store] the program at " + where + " is not a rendezvous store: it answered the handshake with " +
                    "byte " + byte_shown(h.answer) +
                    "; another program (an SSH or web server, another service) listens on that port");
      case Handshake::kUnanswered:
        if (cut_off || asked_to_retry != kAccepted) throw gave_up(h.error);
        throw Error("[store] the program at " + where +
                    " accepted the connection but never answered the store's handshake: it is not the rendezvous "
                    "store (another service on this port?), or " +
                    options_.served_by + " is frozen; " + h.error);
      case Handshake::kCutOff:
        // After a destroy_process_group or a restart by the launcher, the store this reached
        // may be the previous group's (on a restart, perhaps on another machine: the failed
        // attempt's rank 0), closing as it is torn down: retry, as for a store not yet listening.
        cut_off = true;
        if (options_.generation == 0 || Clock::now() >= d) throw gave_up(h.error);
        break;
      case Handshake::kRetry:
        asked_to_retry = h.answer;
        if (h.answer == kOtherGeneration) {
          served = h.served;
          if (options_.join_later_restart && later_restart_of(served, options_.generation)) {
            options_.generation = served;  // this process joins the restart the job is in
            continue;
          }
        }
        if (Clock::now() >= d) throw gave_up(h.error);
        break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

uint32_t TCPStore::seal() { return server_ ? server_->seal() : options_.generation; }

TCPStore::~TCPStore() {
  sock_.close();
  server_.reset();
}

std::string TCPStore::request(uint8_t cmd, const std::string& key, const std::string& value) {
  ENGINE_REQUIRE(key.size() <= kMaxKey && value.size() <= kMaxValue, "[store] key or value too large (key ", key.size(),
                 " bytes, value ", value.size(), " bytes)");
  std::lock_guard<std::mutex> lock(mu_);
  const Deadline d = deadline_in(options_.timeout);
  const std::string peer = "the rendezvous store (rank 0)";
  std::string msg(1, char(cmd));
  put_u32(msg, uint32_t(key.size()));
  msg += key;
  put_u32(msg, uint32_t(value.size()));
  msg += value;
  sock_.send_all(msg.data(), msg.size(), d, peer);
  return read_blob(sock_, kMaxValue + 1, d, peer);
}

void TCPStore::set(const std::string& key, const std::string& value) { request(kSet, key, value); }

bool TCPStore::try_get(const std::string& key, std::string* value) {
  const std::string r = request(kGet, key, "");
  if (r.empty() || r[0] == 0) return false;
  *value = r.substr(1);
  return true;
}

std::string TCPStore::get(const std::string& key) {
  const Deadline d = deadline_in(options_.timeout);
  auto pause = std::chrono::milliseconds(1);
  std::string v;
  // Poll with a growing pause (1 ms to 50 ms): rendezvous keys appear within milliseconds
  // when every rank is up, and a slow rank costs the others only an idle wait.
  while (!try_get(key, &v)) {
    if (Clock::now() >= d)
      throw Error("[store] timed out after " + std::to_string(options_.timeout.count() / 1000) +
                  " s waiting for key \"" + key + "\": a rank that should have set it has not started or has failed");
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
  return v;
}

void TCPStore::wait(const std::vector<std::string>& keys) {
  for (const auto& k : keys) get(k);
}

int64_t TCPStore::add(const std::string& key, int64_t delta) {
  const std::string r = request(kAdd, key, std::string(reinterpret_cast<const char*>(&delta), 8));
  int64_t v = 0;
  ENGINE_REQUIRE(r.size() == 8, "[store] bad reply to add(\"", key, "\")");
  std::memcpy(&v, r.data(), 8);
  return v;
}

std::string TCPStore::compare_set(const std::string& key, const std::string& expected, const std::string& desired) {
  std::string v;
  put_u32(v, uint32_t(expected.size()));
  v += expected + desired;
  return request(kCompareSet, key, v);
}

std::string TCPStore::claim(const std::string& key, const std::string& value) { return request(kClaim, key, value); }

bool TCPStore::delete_key(const std::string& key) {
  const std::string r = request(kDelete, key, "");
  return !r.empty() && r[0] == 1;
}

int64_t TCPStore::num_keys() {
  const std::string r = request(kNumKeys, "", "");
  int64_t n = 0;
  if (r.size() == 8) std::memcpy(&n, r.data(), 8);
  return n;
}

std::string TCPStore::local_address() const {
  sockaddr_in addr{};
  socklen_t len = sizeof addr;
  ::getsockname(sock_.fd(), reinterpret_cast<sockaddr*>(&addr), &len);
  char buf[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &addr.sin_addr, buf, sizeof buf);
  return buf;
}

void fail_together(TCPStore& store, const std::string& prefix, int rank, int world, const std::string& why,
                   int readers) {
  try {
    store.compare_set(prefix + "error", "", why);  // the first problem found is what every rank reports
    if (rank != 0) store.add(prefix + "error_read", 1);
  } catch (const Error&) {
    // Rank 0 may close the store as soon as it counts this rank's reading, before the
    // reply to that count reaches it (or it stopped waiting): this rank has its reason.
    if (rank == 0) throw;
  }
  // Rank 0 waits for every other rank it expects, also the ones that have not connected yet
  // (a rank that starts late, on a busy machine, would otherwise find the store gone).
  if (readers < 0) readers = world - 1;
  const Deadline d = deadline_in(std::chrono::seconds(5));
  while (rank == 0 && Clock::now() < d && store.add(prefix + "error_read", 0) < readers)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  throw Error(why);
}

}  // namespace engine::dist
