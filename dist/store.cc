#include "dist/store.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>

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
  if (is_server) {
    Listener l = Listener::bind(options_.listen_host.empty() ? host : options_.listen_host, port);
    port_ = l.port();
    server_ = std::make_unique<Server>(std::move(l), options_.token, options_.generation);
  }
  const Deadline d = deadline_in(options_.timeout);
  const std::string peer = "the rendezvous store (rank 0)", where = host_ + ":" + std::to_string(port_);
  // The store may ask to be tried again (kBusy: at its connection limit; kOtherGeneration:
  // still serving a process group this process has destroyed, which rank 0 is closing). At
  // the deadline, that is the error to report, whatever the last attempt met.
  uint8_t asked_to_retry = kAccepted;
  const auto retried_too_long = [&] {
    return Error("[store] the store at " + where +
                 (asked_to_retry == kOtherGeneration
                      ? " kept serving another process group of this job than this process's (this one is the "
                        "launcher's restart " +
                            std::to_string(options_.generation >> 16) + " and has destroyed " +
                            std::to_string(options_.generation & 0xFFFF) +
                            " groups before): every rank must call destroy_process_group() and init_process_group() "
                            "alike, and on several machines every launcher must restart the job together (the same "
                            "--max_restarts, no rank left running)"
                      : std::string(" stayed at its connection limit")));
  };
  while (true) {
    try {
      sock_ = Socket::connect(host_, port_, d, peer);
    } catch (const Error&) {
      if (asked_to_retry != kAccepted) throw retried_too_long();
      throw;
    }
    std::string hello;
    put_u32(hello, kMagic);
    put_u32(hello, uint32_t(options_.token.size() + 4));
    hello += options_.token;
    put_u32(hello, options_.generation);
    uint8_t answer = 0;
    try {
      sock_.send_all(hello.data(), hello.size(), d, peer);
      sock_.recv_all(&answer, 1, d, peer);
    } catch (const Error& e) {
      if (asked_to_retry != kAccepted && Clock::now() >= d) throw retried_too_long();
      // After a destroy_process_group or a restart by the launcher, the store this reached
      // may be the previous group's (on a restart, perhaps on another machine: the failed
      // attempt's rank 0), closing as it is torn down: retry, as for a store not yet listening.
      if (options_.generation > 0 && Clock::now() < d) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      throw Error("[store] the store at " + where +
                  " closed the connection during the "
                  "handshake: rank 0 has probably failed or is stopping (look for its error), or another "
                  "job that held this port has just ended; " +
                  e.what());
    }
    if (answer == kAccepted) return;
    if (answer == kRefused)
      throw Error("[store] the store at " + where +
                  " refused this process: its job token differs (is another job using this MASTER_PORT?)");
    asked_to_retry = answer;
    if (Clock::now() >= d) throw retried_too_long();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

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

}  // namespace engine::dist
