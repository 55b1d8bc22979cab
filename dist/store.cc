#include "dist/store.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>

#include "tensor/check.h"

namespace engine::dist {

namespace {

enum Command : uint8_t { kSet = 1, kGet = 2, kAdd = 3, kCompareSet = 4, kDelete = 5, kNumKeys = 6 };
constexpr uint32_t kMagic = 0x44445053;  // "DDPS"
constexpr uint32_t kMaxKey = 4096;
constexpr uint32_t kMaxValue = 64u << 20;

void put_u32(std::string& out, uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); }

// Reads a u32 length and then that many bytes, refusing anything over `limit`.
std::string read_blob(const Socket& s, uint32_t limit, Deadline d, const std::string& peer) {
  uint32_t n = 0;
  s.recv_all(&n, 4, d, peer);
  if (n > limit) throw Error("[store] " + peer + " sent a " + std::to_string(n) + "-byte field (limit " +
                             std::to_string(limit) + ")");
  std::string v(n, '\0');
  s.recv_all(v.data(), n, d, peer);
  return v;
}

}  // namespace

// The server: one thread accepts, one thread per client serves its requests in order.
class TCPStore::Server {
 public:
  Server(Listener listener, std::string token) : listener_(std::move(listener)), token_(std::move(token)) {
    accept_thread_ = std::thread([this] { accept_loop(); });
  }

  ~Server() {
    stop_ = true;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& c : clients_) c->socket.shutdown();
    }
    accept_thread_.join();
    for (auto& c : clients_) c->thread.join();
  }

 private:
  void accept_loop() {
    while (!stop_) {
      Socket s;
      try {
        s = listener_.accept(deadline_in(std::chrono::milliseconds(100)));
      } catch (const Error&) {
        continue;  // timeout: check stop_ and keep accepting
      }
      auto client = std::make_shared<Client>();
      client->socket = std::move(s);
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      reap_finished_clients();
      client->thread = std::thread([this, client] {
        serve(client->socket);
        client->socket.shutdown();  // the client sees the connection end, not a silent stall
        client->finished = true;
      });
      clients_.push_back(client);
    }
  }

  // Joins the threads of clients that have gone, so that a server that sees many
  // connections over a long job (or a stream of strangers) does not accumulate them.
  // Called with mu_ held.
  void reap_finished_clients() {
    for (auto it = clients_.begin(); it != clients_.end();) {
      if ((*it)->finished) {
        (*it)->thread.join();
        it = clients_.erase(it);
      } else {
        ++it;
      }
    }
  }

  void serve(const Socket& s) {
    try {
      // Handshake: magic and the job's token, within a short deadline.
      const Deadline hello = deadline_in(std::chrono::seconds(10));
      uint32_t magic = 0;
      s.recv_all(&magic, 4, hello, "a store client");
      if (magic != kMagic) return;  // not one of ours: drop it
      if (read_blob(s, kMaxKey, hello, "a store client") != token_) return;
      const uint8_t ok = 1;
      s.send_all(&ok, 1, hello, "a store client");
      while (!stop_) {
        if (!wait_fd(s.fd(), false, deadline_in(std::chrono::milliseconds(100)))) continue;
        uint8_t cmd = 0;
        const Deadline d = deadline_in(std::chrono::seconds(30));
        s.recv_all(&cmd, 1, d, "a store client");
        const std::string key = read_blob(s, kMaxKey, d, "a store client");
        const std::string value = read_blob(s, kMaxValue, d, "a store client");
        std::string reply = handle(cmd, key, value);
        std::string msg;
        put_u32(msg, uint32_t(reply.size()));
        msg += reply;
        s.send_all(msg.data(), msg.size(), d, "a store client");
      }
    } catch (const Error&) {
      // A client that disconnects (or misbehaves) only ends its own connection.
    }
  }

  std::string handle(uint8_t cmd, const std::string& key, const std::string& value) {
    std::lock_guard<std::mutex> lock(mu_);
    switch (cmd) {
      case kSet:
        data_[key] = value;
        return "";
      case kGet: {
        auto it = data_.find(key);
        return it == data_.end() ? std::string("\0", 1) : "\1" + it->second;  // found flag + value
      }
      case kAdd: {
        int64_t delta = 0, current = 0;
        if (value.size() == 8) std::memcpy(&delta, value.data(), 8);
        auto it = data_.find(key);
        if (it != data_.end() && it->second.size() == 8) std::memcpy(&current, it->second.data(), 8);
        current = int64_t(uint64_t(current) + uint64_t(delta));  // wraps, as the client's int64 would
        data_[key] = std::string(reinterpret_cast<const char*>(&current), 8);
        return data_[key];
      }
      case kCompareSet: {
        // value = [u32 expected length][expected][desired]
        uint32_t n = 0;
        if (value.size() < 4) return "";
        std::memcpy(&n, value.data(), 4);
        if (n > value.size() - 4) return "";
        const std::string expected = value.substr(4, n), desired = value.substr(4 + n);
        auto it = data_.find(key);
        const std::string current = it == data_.end() ? "" : it->second;
        if (current == expected) data_[key] = desired;
        return data_.count(key) ? data_[key] : "";
      }
      case kDelete:
        return data_.erase(key) ? "\1" : std::string("\0", 1);
      case kNumKeys: {
        const int64_t n = int64_t(data_.size());
        return std::string(reinterpret_cast<const char*>(&n), 8);
      }
      default:
        throw Error("[store] unknown command");
    }
  }

  Listener listener_;
  std::string token_;
  std::atomic<bool> stop_{false};
  std::thread accept_thread_;
  std::mutex mu_;
  struct Client {
    Socket socket;
    std::thread thread;
    std::atomic<bool> finished{false};
  };
  std::vector<std::shared_ptr<Client>> clients_;
  std::map<std::string, std::string> data_;
};

TCPStore::TCPStore(const std::string& host, int port, bool is_server, StoreOptions options)
    : host_(host), port_(port), options_(std::move(options)) {
  if (is_server) {
    Listener l = Listener::bind(options_.listen_host.empty() ? host : options_.listen_host, port);
    port_ = l.port();
    server_ = std::make_unique<Server>(std::move(l), options_.token);
  }
  const Deadline d = deadline_in(options_.timeout);
  const std::string peer = "the rendezvous store (rank 0)";
  sock_ = Socket::connect(host_, port_, d, peer);
  std::string hello;
  put_u32(hello, kMagic);
  put_u32(hello, uint32_t(options_.token.size()));
  hello += options_.token;
  sock_.send_all(hello.data(), hello.size(), d, peer);
  uint8_t ok = 0;
  try {
    sock_.recv_all(&ok, 1, d, peer);
  } catch (const Error&) {
    throw Error("[store] the store at " + host_ + ":" + std::to_string(port_) +
                " refused this process: its job token differs (is another job using this MASTER_PORT?)");
  }
}

TCPStore::~TCPStore() {
  sock_.close();
  server_.reset();
}

std::string TCPStore::request(uint8_t cmd, const std::string& key, const std::string& value) {
  ENGINE_REQUIRE(key.size() <= kMaxKey && value.size() <= kMaxValue, "[store] key or value too large (key ",
                 key.size(), " bytes, value ", value.size(), " bytes)");
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
