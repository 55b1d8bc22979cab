#include "dist/store_server.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "dist/open_files.h"
#include "dist/start_thread.h"
#include "tensor/check.h"

namespace engine::dist {

std::string store_wire::read_blob(const Socket& s, uint32_t limit, Deadline d, const std::string& peer) {
  uint32_t n = 0;
  s.recv_all(&n, 4, d, peer);
  if (n > limit)
    throw Error("[store] " + peer + " sent a " + std::to_string(n) + "-byte field (limit " + std::to_string(limit) +
                ")");
  std::string v(n, '\0');
  s.recv_all(v.data(), n, d, peer);
  return v;
}

using namespace store_wire;

struct TCPStore::Server::Pending {
  Socket socket;
  std::string got;  // the handshake bytes so far: magic, token length, token
  Deadline until;
};

TCPStore::Server::Server(Listener listener, std::string token, uint32_t generation)
    : listener_(std::move(listener)), token_(std::move(token)), generation_(generation) {
  accept_thread_ = start_thread("the rendezvous store", [this] { accept_loop(); });
}

TCPStore::Server::~Server() {
  stop_ = true;
  accept_thread_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& c : clients_) c->socket.shutdown();
  }
  for (auto& c : clients_) c->thread.join();
}

void TCPStore::Server::log(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& [when, suppressed] = last_logged_[reason];
  if (Clock::now() - when < std::chrono::seconds(1)) {
    ++suppressed;
    return;
  }
  std::fprintf(stderr, "[store] %s%s\n", reason.c_str(),
               suppressed ? (" (and " + std::to_string(suppressed) + " more in the last second)").c_str() : "");
  when = Clock::now();
  suppressed = 0;
}

// One thread, poll(): new connections, and every pending handshake. Nothing here blocks.
void TCPStore::Server::accept_loop() {
  std::vector<Pending> pending;
  Deadline accept_again = Clock::now();  // later while this process has no file descriptor left
  while (!stop_) {
    // Out of descriptors, the listener stays readable and accept fails at once: it is left
    // out of the poll for a while rather than spun on.
    const bool accepting = Clock::now() >= accept_again;
    std::vector<pollfd> fds{{accepting ? listener_.fd() : -1, POLLIN, 0}};
    for (auto& p : pending) fds.push_back({p.socket.fd(), POLLIN, 0});
    ::poll(fds.data(), nfds_t(fds.size()), 100);
    if ((fds[0].revents & POLLIN) && !accept_new(pending)) accept_again = Clock::now() + std::chrono::milliseconds(100);
    std::vector<Pending> still;
    for (size_t i = 0; i < pending.size(); ++i) {
      Pending& p = pending[i];
      const bool readable = i + 1 < fds.size() && (fds[i + 1].revents & (POLLIN | POLLHUP | POLLERR));
      if (readable && !advance(p)) continue;
      if (Clock::now() > p.until) {
        log("refused a connection: no handshake within " + std::to_string(kHandshakeTime.count()) + " s");
        continue;
      }
      still.push_back(std::move(p));
    }
    pending = std::move(still);
  }
}

bool TCPStore::Server::accept_new(std::vector<Pending>& pending) {
  for (int i = 0; i < 64; ++i) {  // whatever is waiting, a bounded batch at a time
    Socket s;
    try {
      s = listener_.accept(Clock::now());
    } catch (const OutOfFiles& e) {
      log(std::string(e.what()) + "; the connection waits");
      return false;
    } catch (const Error&) {
      return true;  // nothing more to accept now
    }
    if (pending.size() >= kMaxHandshaking) {
      // Full of connections that have not said who they are: the oldest is the likeliest
      // to be idle, and dropping it lets a real rank in.
      pending.erase(pending.begin());
      log("refused a connection: more than " + std::to_string(kMaxHandshaking) +
          " connections waiting for their handshake; "
          "dropped the oldest");
    }
    pending.push_back({std::move(s), "", deadline_in(kHandshakeTime)});
  }
  return true;
}

bool TCPStore::Server::advance(Pending& p) {
  // Exactly the handshake's bytes, never more: what follows belongs to the client's thread.
  uint32_t magic = 0, len = 0;
  if (p.got.size() >= 8) std::memcpy(&magic, p.got.data(), 4), std::memcpy(&len, p.got.data() + 4, 4);
  const size_t need = p.got.size() < 8 ? 8 - p.got.size() : 8 + len - p.got.size();
  char buf[kMaxKey];
  const ssize_t n = ::recv(p.socket.fd(), buf, need, MSG_DONTWAIT);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return false;  // gone
  if (n > 0) p.got.append(buf, size_t(n));
  if (p.got.size() < 8) return true;
  std::memcpy(&magic, p.got.data(), 4);
  std::memcpy(&len, p.got.data() + 4, 4);
  if (magic != kMagic || len > kMaxKey + 4) {
    log("refused a connection: not a store client (bad magic or length)");
    return false;
  }
  if (p.got.size() < 8 + len) return true;
  const bool token_ok = len == token_.size() + 4 && p.got.compare(8, token_.size(), token_) == 0;
  uint32_t generation = 0;
  if (token_ok) std::memcpy(&generation, p.got.data() + 8 + token_.size(), 4);
  if (token_ok && generation != generation_) serve_restart_of(generation);
  uint8_t answer = !token_ok ? kRefused : generation != generation_ ? kOtherGeneration : kAccepted;
  {
    std::lock_guard<std::mutex> lock(mu_);
    reap_finished_clients();
    if (answer == kAccepted && clients_.size() >= kMaxClients) answer = kBusy;
  }
  // Another generation: the store says which it serves, so that a process whose launcher
  // was started afresh can join the restart the job is in (store.cc, connect_to_server).
  std::string reply(1, char(answer));
  const uint32_t served = generation_;
  if (answer == kOtherGeneration) reply.append(reinterpret_cast<const char*>(&served), 4);
  try {
    p.socket.send_all(reply.data(), reply.size(), deadline_in(std::chrono::seconds(1)), "a store client");
  } catch (const Error&) {
    return false;
  }
  if (answer == kRefused) log("refused a connection: wrong job token (another job on this port?)");
  if (answer == kBusy) log("refused a connection: " + std::to_string(kMaxClients) + " clients connected already");
  if (answer == kAccepted) admit(std::move(p.socket));
  return false;
}

// A store whose machine was restarted (or replaced) starts at its launcher's restart 0,
// while the other machines' launchers have restarted the job: their ranks come at a later
// restart of the same process group. The store serves that restart from then on, if its
// group is still forming (not sealed: a formed group's rank 0 that meets a later restart is
// a failed attempt's, about to go) and no client has left it (a rank of the store's own
// restart that died in the set-up may have left keys of that attempt behind).
bool TCPStore::Server::serve_restart_of(uint32_t generation) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint32_t mine = generation_;
  if (sealed_ || mine == 0xFFFFFFFFu || generation == 0xFFFFFFFFu) return false;  // the launchers' store
  if (!later_restart_of(generation, mine)) return false;
  reap_finished_clients();
  if (clients_gone_ != 0) return false;
  for (const auto& c : clients_) {  // gone, but its thread has not yet read the end
    pollfd p{c->socket.fd(), POLLRDHUP, 0};
    if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) return false;
  }
  generation_ = generation;
  return true;
}

uint32_t TCPStore::Server::seal() {
  std::lock_guard<std::mutex> lock(mu_);
  sealed_ = true;
  return generation_;
}

void TCPStore::Server::admit(Socket s) {
  auto client = std::make_shared<Client>();
  client->socket = std::move(s);
  try {
    client->thread = start_thread("a store client", [this, client] {
      serve(*client);
      client->socket.shutdown();  // the client sees the connection end, not a silent stall
      client->finished = true;
    });
  } catch (const Error& e) {
    // Out of threads: this runs on the accept thread, where an exception would abort the
    // process. The client is turned away (its connection closes) and the server goes on.
    log(std::string(e.what()) + "; closed that connection");
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  clients_.push_back(client);
}

// Joins the threads of clients that have gone, so that a server that sees many
// connections over a long job does not accumulate them. Called with mu_ held.
void TCPStore::Server::reap_finished_clients() {
  for (auto it = clients_.begin(); it != clients_.end();) {
    if ((*it)->finished) {
      (*it)->thread.join();
      it = clients_.erase(it);
      ++clients_gone_;
    } else {
      ++it;
    }
  }
}

// A value's bytes are counted against kMaxHeldBytes before they are read, and memory
// grows only as they arrive: announcing 16 MB and sending nothing holds nothing.
std::string TCPStore::Server::read_value(const Socket& s, Deadline d) {
  uint32_t n = 0;
  s.recv_all(&n, 4, d, "a store client");
  if (n > kMaxValue)
    throw Error("[store] a client sent a " + std::to_string(n) + "-byte value (limit " + std::to_string(kMaxValue) +
                ")");
  // Small values (rendezvous keys, addresses) are never held up by others' big ones.
  const int64_t counted = n > kSmallValue ? n : 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (receiving_bytes_ + counted > kMaxHeldBytes)
      throw Error("[store] a client's " + std::to_string(n) + "-byte value would take the values being received past " +
                  std::to_string(kMaxHeldBytes >> 20) + " MB");
    receiving_bytes_ += counted;
  }
  std::string v;
  try {
    while (v.size() < n) {
      const size_t was = v.size(), step = std::min<size_t>(n - was, 64 << 10);
      v.resize(was + step);
      s.recv_all(v.data() + was, step, d, "a store client");
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    receiving_bytes_ -= counted;
    throw;
  }
  std::lock_guard<std::mutex> lock(mu_);
  receiving_bytes_ -= counted;  // handle() counts what it keeps
  return v;
}

void TCPStore::Server::serve(Client& c) {
  const Socket& s = c.socket;
  try {
    while (!stop_) {
      if (!wait_fd(s.fd(), false, deadline_in(std::chrono::milliseconds(100)))) continue;
      uint8_t cmd = 0;
      const Deadline d = deadline_in(std::chrono::seconds(30));
      s.recv_all(&cmd, 1, d, "a store client");
      const std::string key = read_blob(s, kMaxKey, d, "a store client");
      const std::string value = read_value(s, d);
      const std::string reply = handle(cmd, key, value, c);
      const uint32_t len = uint32_t(reply.size());
      std::string msg(reinterpret_cast<const char*>(&len), 4);
      msg += reply;
      s.send_all(msg.data(), msg.size(), d, "a store client");
    }
  } catch (const std::exception& e) {
    // A client that disconnects only ends its own connection; one that misbehaves is logged.
    if (std::strstr(e.what(), "closed") == nullptr && std::strstr(e.what(), "reset") == nullptr)
      log(std::string("dropped a client: ") + e.what());
  }
  release(c);
}

// A process that claimed a key (a launcher its node rank) and has gone frees it: the key is
// removed, unless something else has been stored under it since.
void TCPStore::Server::release(Client& c) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [key, value] : c.claimed) {
    auto it = data_.find(key);
    if (it == data_.end() || it->second != value) continue;
    stored_bytes_ -= int64_t(key.size() + value.size());
    data_.erase(it);
  }
  c.claimed.clear();
}

std::string TCPStore::Server::handle(uint8_t cmd, const std::string& key, const std::string& value, Client& c) {
  std::lock_guard<std::mutex> lock(mu_);
  // Keeps stored_bytes_ equal to the bytes of every key and value stored.
  auto store = [&](const std::string& k, const std::string& v) {
    auto it = data_.find(k);
    const int64_t before = it == data_.end() ? 0 : int64_t(k.size() + it->second.size());
    const int64_t after = int64_t(k.size() + v.size());
    if (stored_bytes_ - before + after > kMaxHeldBytes)
      throw Error("[store] the store is full (" + std::to_string(kMaxHeldBytes >> 20) + " MB)");
    stored_bytes_ += after - before;
    data_[k] = v;
  };
  switch (cmd) {
    case kSet: store(key, value); return "";
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
      store(key, std::string(reinterpret_cast<const char*>(&current), 8));
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
      if (current == expected) store(key, desired);
      return data_.count(key) ? data_[key] : "";
    }
    case kDelete: {
      auto it = data_.find(key);
      if (it == data_.end()) return std::string("\0", 1);
      stored_bytes_ -= int64_t(key.size() + it->second.size());
      data_.erase(it);
      return "\1";
    }
    case kClaim: {  // set if absent, held for as long as this connection lasts (release)
      auto it = data_.find(key);
      if (it != data_.end()) return it->second;
      store(key, value);
      c.claimed.emplace_back(key, value);
      // A claimant's machine that fails hard closes nothing: its connection would look alive,
      // and hold the key, for hours. Probed (watch_link), it ends about 20 s after the last
      // answer, or at once when the restarted machine answers a probe with a reset.
      watch_link(c.socket, std::chrono::seconds(20));
      return value;
    }
    case kNumKeys: {
      const int64_t n = int64_t(data_.size());
      return std::string(reinterpret_cast<const char*>(&n), 8);
    }
    default: throw Error("[store] unknown command");
  }
}

}  // namespace engine::dist
