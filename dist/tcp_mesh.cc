// ProcessGroupTCP's setup (tcp_group.h): the mesh of connections between the ranks, each
// opened with a hello that names the rank and proves the job's token.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "dist/addresses.h"
#include "dist/open_files.h"
#include "dist/tcp_group.h"
#include "dist/tcp_wire.h"
#include "tensor/check.h"
#include "tensor/parse.h"

namespace engine::dist {

using namespace wire;

// ---------------------------------------------------------------------------------------
// Setup: every rank listens, publishes its address in the store, connects to each lower
// rank and accepts each higher one. Each connection starts with both sides' hello
// (magic, rank, job token), so a stray or foreign connection is refused.

namespace {
struct Hello {
  uint32_t magic;
  int32_t rank;
  uint32_t token_len;
};

void send_hello(const Socket& s, int rank, const std::string& token, Deadline d, const std::string& peer) {
  Hello h{kMagic, rank, uint32_t(token.size())};
  s.send_all(&h, sizeof h, d, peer);
  s.send_all(token.data(), token.size(), d, peer);
}

constexpr int32_t kRefusedToken = -2;  // the rank field of a hello that refuses the connection

// The checks on a whole hello (header and token), for both sides. A stranger with another
// job's token is told so before it is dropped.
int check_hello(const Hello& h, const std::string& t, const Socket& s, const std::string& token, int world,
                const std::string& peer) {
  ENGINE_REQUIRE(h.magic == kMagic, "[init_process_group] ", peer, " is not a process of this engine (bad magic)");
  ENGINE_REQUIRE(h.rank != kRefusedToken, "[init_process_group] ", peer,
                 " refused this process: it presented "
                 "another job's token (is a second job using the same MASTER_ADDR/MASTER_PORT?)");
  if (t != token) {
    const Hello no{kMagic, kRefusedToken, 0};  // tell the stranger why, then drop it
    try {
      s.send_all(&no, sizeof no, deadline_in(std::chrono::milliseconds(200)), peer);
    } catch (const Error&) {}
    throw Error("[init_process_group] " + peer +
                " presented another job's token: is a second job using the same "
                "MASTER_ADDR/MASTER_PORT?");
  }
  ENGINE_REQUIRE(h.rank >= 0 && h.rank < world, "[init_process_group] ", peer, " claims rank ", h.rank, " outside 0..",
                 world - 1);
  return h.rank;
}

constexpr uint32_t kMaxToken = 1024;

int recv_hello(const Socket& s, const std::string& token, int world, Deadline d, const std::string& peer) {
  Hello h{};
  s.recv_all(&h, sizeof h, d, peer);
  ENGINE_REQUIRE(h.magic == kMagic, "[init_process_group] ", peer, " is not a process of this engine (bad magic)");
  ENGINE_REQUIRE(h.token_len <= kMaxToken, "[init_process_group] ", peer, " sent an oversized token");
  std::string t(h.token_len, '\0');
  s.recv_all(t.data(), t.size(), d, peer);
  return check_hello(h, t, s, token, world, peer);
}

// A connection accepted but not yet introduced: its hello's bytes as they arrive.
struct Arriving {
  Socket socket;
  Deadline until;  // a few seconds to say hello, then it is dropped
  std::string bytes;
};

// Reads what `a` has sent so far without waiting, never past its hello (what a peer sends
// next belongs to the collectives). Returns true when it is finished with: its hello is
// whole (then *hello and *tok hold it) or it must be dropped (then hello->magic is 0).
bool read_arriving(Arriving& a, Hello* hello, std::string* tok) {
  size_t want = sizeof(Hello);  // the header first, then the token it announces
  const bool had_header = a.bytes.size() >= sizeof(Hello);
  if (had_header) {
    std::memcpy(hello, a.bytes.data(), sizeof(Hello));
    if (hello->magic != kMagic || hello->token_len > kMaxToken) return hello->magic = 0, true;
    want += hello->token_len;
  }
  if (a.bytes.size() < want) {
    char buf[sizeof(Hello) + kMaxToken];
    const ssize_t n = ::recv(a.socket.fd(), buf, want - a.bytes.size(), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return hello->magic = 0, true;
    if (n > 0) a.bytes.append(buf, size_t(n));
    if (!had_header && a.bytes.size() == sizeof(Hello)) return read_arriving(a, hello, tok);  // now the token
  }
  if (a.bytes.size() < want) return false;
  *tok = a.bytes.substr(sizeof(Hello), hello->token_len);
  return true;
}
}  // namespace

namespace {
// A rank's own setup error, as the other ranks repeat it: which rank, on which machine
// (its "here" and "this machine" are the failing rank's, not theirs).
std::string from_rank(int rank, const std::string& why) {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string tag = "[init_process_group] ", who = "rank " + std::to_string(rank) + " (on " + host + "): ";
  const std::string rest = why.rfind(tag, 0) == 0 ? why.substr(tag.size()) : why;
  if (rest.rfind("rank " + std::to_string(rank) + " ", 0) == 0) return tag + rest;  // it names the rank already
  return tag + who + rest;
}

// A listener on host: in ENGINE_PORT_RANGE ("lo-hi", for firewalls that open only those
// ports) when set, else on any free port.
Listener listen_on(const std::string& host) {
  const char* range = std::getenv("ENGINE_PORT_RANGE");
  if (!range || !*range) return Listener::bind(host, 0);
  const std::string r = range;
  const size_t dash = r.find('-');
  ENGINE_REQUIRE(dash != std::string::npos, "[init_process_group] ENGINE_PORT_RANGE=\"", r,
                 "\" must be two ports, LOW-HIGH (e.g. 29600-29700)");
  const int lo = int(parse_int(r.substr(0, dash), "[init_process_group] ENGINE_PORT_RANGE's low port", 1, 65535));
  const int hi = int(parse_int(r.substr(dash + 1), "[init_process_group] ENGINE_PORT_RANGE's high port", lo, 65535));
  return bind_in_range(host, lo, hi);
}
}  // namespace

// Where this rank listens: the address of ENGINE_SOCKET_IFNAME when set (as gloo's
// GLOO_SOCKET_IFNAME), else of the interface this rank reaches the store through. That is
// a loopback address where the store's host name is this machine's own, which Debian and
// Ubuntu map to 127.0.1.1 in /etc/hosts, or is 0.0.0.0 (every interface), while the other
// machines dial its real address: then it is the interface that reaches the first rank on
// another machine (each rank publishes its network before its address, and a rank whose
// route to the store is not a loopback one publishes its address without waiting for anyone).
std::string ProcessGroupTCP::listen_host(const std::string& network, Deadline d) {
  const char* ifname = std::getenv("ENGINE_SOCKET_IFNAME");
  if (ifname && *ifname) {
    // A bad name is told to the ranks waiting for this one's address, as a bad
    // ENGINE_PORT_RANGE is (connect_mesh): rank 0 failing here would otherwise close the
    // store under them, and they would be the ones named, for a closed connection.
    try {
      ENGINE_REQUIRE(std::strlen(ifname) < 16, "[init_process_group] ENGINE_SOCKET_IFNAME=\"", ifname,
                     "\" is longer than an interface name can be (15 characters)");
      return interface_address(ifname);
    } catch (const Error& e) {
      mesh_failed(from_rank(rank_, e.what()));
    }
  }
  const std::string local = store_->local_address(), host = store_->host();
  if (!loopback_here(local) || options_.one_machine || network.empty() || !loopback_only_here(host)) return local;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || wait_for_key("tcp/network/", r, "its network", d) == network) continue;
    const std::string addr = wait_for_key("tcp/addr/", r, "its address", d);
    const std::string from = route_source(addr.substr(0, addr.rfind(':')));
    if (from.empty() || loopback_here(from)) continue;
    if (rank_ == 0 && options_.key_prefix.empty()) {
      // 0.0.0.0: given so, or written so by a file:// rendezvous (file_rendezvous.h).
      const std::string store_at =
          host == "0.0.0.0"
              ? "rank 0's store listens on every interface of this machine (0.0.0.0)"
              : "\"" + host +
                    "\" is a loopback address on this machine (as /etc/hosts often maps a machine's own name)";
      std::fprintf(stderr,
                   "[init_process_group] %s, not the address other machines reach it at: its ranks listen at %s, the "
                   "address that reaches %s's machine (ENGINE_SOCKET_IFNAME chooses another interface)\n",
                   store_at.c_str(), from.c_str(), peer_name(r).c_str());
    }
    return from;
  }
  return local;
}

// What rank r published under `prefix` (its address, its network), read 100 times a second,
// and the reason a rank that failed to join left (fail_if_mesh_failed) 10 times a second.
std::string ProcessGroupTCP::wait_for_key(const std::string& prefix, int r, const std::string& what, Deadline d) {
  const std::string waiting = "[init_process_group] rank " + std::to_string(rank_) + " was waiting for " +
                              peer_name(r) + " to publish " + what + ": ";
  std::string value;
  for (int polls = 0;; ++polls) {
    try {
      if (store_->try_get(key(prefix) + std::to_string(r), &value)) return value;
    } catch (const Error& e) {  // the store's rank 0 has gone (it gave up waiting, or failed)
      throw Error(waiting + e.what());
    }
    if (polls % 10 == 0) fail_if_mesh_failed();
    if (Clock::now() >= d) throw Error(waiting + "it timed out: that rank has not started or has failed");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// A rank that cannot join the mesh says why to the ranks waiting for its connection, which
// would otherwise wait out the whole timeout knowing nothing (accept_peers reads it).
void ProcessGroupTCP::mesh_failed(const std::string& why) { fail_together(*store_, key("tcp/"), rank_, size_, why); }

// The ranks waiting on the mesh read that reason (10 times a second) and fail with it too.
void ProcessGroupTCP::fail_if_mesh_failed() {
  std::string why;
  if (store_->try_get(key("tcp/error"), &why)) mesh_failed(why);
}

void ProcessGroupTCP::connect_mesh() {
  // Published before the address: the network this rank is in, for the loopback check
  // below, and the machine the topology sees it on (discover_topology()).
  const std::string network = network_id();
  machine_ = options_.host_id.empty() ? machine_id() : options_.host_id;
  store_->set(key("tcp/network/") + std::to_string(rank_), network);
  // With its pid after the last newline: what waiting_for() looks up in /proc on the same machine.
  store_->set(key("topo/host/") + std::to_string(rank_), machine_ + "\n" + std::to_string(getpid()));
  peer_address_.assign(size_t(size_), "");
  if (size_ == 1) return;
  const Deadline d = deadline_in(options_.timeout);
  const std::string host = listen_host(network, d);
  // A rank that cannot listen (a bad ENGINE_PORT_RANGE, every port taken) or is given a bad
  // ENGINE_LINK_TIMEOUT (as for the range, read only where there are links) tells the others,
  // which wait for its address: rank 0 failing here would otherwise end the store under
  // them, and they would be the ones named, for a closed connection.
  Listener listener;
  try {
    if (const char* v = std::getenv("ENGINE_LINK_TIMEOUT"); v && *v)
      options_.link_timeout =
          std::chrono::seconds(parse_int(v, "[init_process_group] environment variable ENGINE_LINK_TIMEOUT", 0, 32767));
    reserve_open_files(size_ - 1 + 16, "[init_process_group] rank " + std::to_string(rank_) +
                                           " (a connection to each of " + std::to_string(size_ - 1) + " other ranks)");
    listener = listen_on(host);
  } catch (const Error& e) {
    mesh_failed(from_rank(rank_, e.what()));
  }
  address_ = host + ":" + std::to_string(listener.port());
  store_->set(key("tcp/addr/") + std::to_string(rank_), address_);
  for (int r = 0; r < rank_; ++r) {
    const std::string addr = wait_for_key("tcp/addr/", r, "its address", d);
    const size_t colon = addr.rfind(':');
    const std::string peer_host = addr.substr(0, colon);
    // A loopback address reaches only the machine it is dialled from: published by a rank
    // on another machine, it can never be reached (ENGINE_SOCKET_IFNAME=lo there).
    if (loopback_here(peer_host) && !network.empty() && store_->get(key("tcp/network/") + std::to_string(r)) != network)
      mesh_failed("[init_process_group] " + peer_name(r) + " listens at " + addr +
                  ", a loopback address, but runs on another machine than rank " + std::to_string(rank_) + " (at " +
                  address_ +
                  "), which cannot reach it there: set ENGINE_SOCKET_IFNAME on that machine to the interface the "
                  "machines share (not lo)");
    Socket s;
    try {
      s = Socket::connect(peer_host, std::stoi(addr.substr(colon + 1)), d, peer_name(r));
    } catch (const OutOfFiles& e) {
      mesh_failed("[init_process_group] rank " + std::to_string(rank_) + ": " + e.what());
    } catch (const Error& e) {
      mesh_failed("[init_process_group] rank " + std::to_string(rank_) + " (at " + address_ + ") cannot reach " +
                  peer_name(r) + " at " + addr + ": " + e.what() +
                  ". Each rank listens on the address it published; set ENGINE_SOCKET_IFNAME to the interface "
                  "the machines share, and open the ports (ENGINE_PORT_RANGE) between them");
    }
    or_reason_in_store([&] { send_hello(s, rank_, options_.token, d, peer_name(r)); });
    await_answer(s, d);  // reads the store itself: not inside or_reason_in_store
    int got = -1;
    or_reason_in_store([&] { got = recv_hello(s, options_.token, size_, d, peer_name(r)); });
    ENGINE_REQUIRE(got == r, "[init_process_group] expected rank ", r, " at ", addr, " but rank ", got, " answered");
    peers_[r] = std::move(s);
  }
  accept_peers(listener, d);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    peer_address_[size_t(r)] = remote_address(peers_[r].fd());
    watch_link(peers_[r], options_.link_timeout);
  }
}

// Runs one half of a hello exchange. A peer that hangs up mid-exchange may be failing for a
// reason another rank left in the store (it reads the store too): this rank then reports
// that reason, as every other rank does, rather than the connection it lost. Nothing run
// through here may read the store itself: fail_together counts each rank's reading once.
void ProcessGroupTCP::or_reason_in_store(const std::function<void()>& exchange) {
  try {
    exchange();
  } catch (const Error&) {
    fail_if_mesh_failed();
    throw;
  }
}

// Waits until a lower rank answers this rank's hello. That rank may instead be failing for a
// reason another rank left in the store, so this rank reports the same reason rather than
// the connection it then closes.
void ProcessGroupTCP::await_answer(const Socket& s, Deadline d) {
  for (;;) {
    fail_if_mesh_failed();
    pollfd p{s.fd(), POLLIN, 0};
    if (Clock::now() >= d || ::poll(&p, 1, std::min(100, ms_until(d))) != 0) return;  // recv_hello reads or fails
  }
}

// Accepts each higher rank. Connections are introduced side by side (poll), each with a few
// seconds to send its hello, so a stray, idle or slow connection (a port scan, a flood)
// holds up no one; at most kMaxArriving wait at once (more where more ranks are to come),
// the oldest dropped first.
void ProcessGroupTCP::accept_peers(const Listener& listener, Deadline d) {
  const size_t kMaxArriving = std::max(256, size_ - 1 - rank_);
  constexpr auto kHelloTime = std::chrono::seconds(30);
  std::vector<Arriving> arriving;
  Deadline look_at_store = Clock::now();
  for (int accepted = 0; accepted < size_ - 1 - rank_;) {
    const Deadline now = Clock::now();
    if (now >= look_at_store) {  // a rank that could not connect may have said why
      fail_if_mesh_failed();
      look_at_store = now + std::chrono::milliseconds(100);
    }
    if (now >= d) {
      std::string missing;
      int absent = 0;
      for (int r = rank_ + 1; r < size_; ++r)
        if (!peers_[r].valid()) missing += (missing.empty() ? "" : ", ") + std::to_string(r), ++absent;
      // Told through the store, which rank 0 keeps up until the ranks that did come have
      // read it: they may be waiting on the store for a missing rank's address, and would
      // otherwise lose the store under them and name only that.
      fail_together(*store_, key("tcp/"), rank_, size_,
                    "[init_process_group] rank " + std::to_string(rank_) + " timed out waiting for rank(s) " + missing +
                        " to connect: they have not started, failed, or were refused",
                    size_ - 1 - absent);
    }
    Deadline wake = std::min(d, look_at_store);
    std::vector<pollfd> fds{{listener.fd(), POLLIN, 0}};
    for (const Arriving& a : arriving) fds.push_back({a.socket.fd(), POLLIN, 0}), wake = std::min(wake, a.until);
    ::poll(fds.data(), nfds_t(fds.size()), std::max(1, ms_until(wake)));
    for (size_t i = arriving.size(); i-- > 0;) {  // newest first, so erasing keeps the indices of the rest
      Arriving& a = arriving[i];
      Hello h{};
      std::string tok;
      const bool done = (fds[i + 1].revents != 0 && read_arriving(a, &h, &tok)) || Clock::now() >= a.until;
      if (!done) continue;
      int r = -1;
      try {
        if (h.magic == kMagic && tok.size() == h.token_len)
          r = check_hello(h, tok, a.socket, options_.token, size_, "a connecting process");
      } catch (const Error&) {  // not one of ours: drop it and keep waiting for the real peers
      }
      if (r >= 0) {
        ENGINE_REQUIRE(r > rank_ && !peers_[r].valid(), "[init_process_group] two processes claim rank ", r,
                       ": check that every process has a different RANK");
        or_reason_in_store([&] { send_hello(a.socket, rank_, options_.token, d, peer_name(r)); });
        peers_[r] = std::move(a.socket);
        ++accepted;
      }
      arriving.erase(arriving.begin() + long(i));
    }
    if (fds[0].revents != 0) {
      try {
        Socket s = listener.accept(Clock::now());
        if (arriving.size() == kMaxArriving) arriving.erase(arriving.begin());
        arriving.push_back({std::move(s), std::min(d, Clock::now() + kHelloTime), {}});
      } catch (const OutOfFiles& e) {  // would come back at once, forever: the others are told
        mesh_failed("[init_process_group] rank " + std::to_string(rank_) + ": " + e.what());
      } catch (const Error&) {  // gone before it was accepted
      }
    }
  }
}

}  // namespace engine::dist
