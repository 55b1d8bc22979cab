#include "dist/socket.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "dist/addresses.h"
#include "dist/open_files.h"
#include "tensor/check.h"

namespace engine::dist {

int ms_until(Deadline deadline) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return int(std::max<int64_t>(0, std::min<int64_t>(ms, INT_MAX)));
}

bool wait_fd(int fd, bool for_write, Deadline deadline) {
  pollfd p{fd, short(for_write ? POLLOUT : POLLIN), 0};
  while (true) {
    // In slices of a second, so that a stopped and continued process sees its stop
    // (stop_clock.h) rather than a deadline passed while it was stopped.
    const int r = ::poll(&p, 1, std::min(ms_until(deadline), 1000));
    if (r > 0) return true;
    if (r == 0) {
      if (Clock::now() >= deadline) return false;
      continue;
    }
    if (errno != EINTR) return true;  // let the following read/write report the error
  }
}

std::chrono::milliseconds timeout_from_env(const char* who) {
  const char* v = std::getenv("ENGINE_DIST_TIMEOUT");
  if (!v || !*v) return std::chrono::seconds(300);
  char* end = nullptr;
  errno = 0;
  const long long s = std::strtoll(v, &end, 10);
  ENGINE_REQUIRE(end != v && *end == '\0', who, " environment variable ENGINE_DIST_TIMEOUT=\"", v,
                 "\" is not an integer");
  ENGINE_REQUIRE(errno == 0 && s >= INT_MIN && s <= INT_MAX, who, " environment variable ENGINE_DIST_TIMEOUT=", v,
                 " is out of range");
  ENGINE_REQUIRE(s > 0 && s <= 7 * 86400, who,
                 " ENGINE_DIST_TIMEOUT must be a number of seconds from 1 to 604800 (a week), got ", s);
  return std::chrono::seconds(s);
}

void throw_io_error(const char* what, const std::string& peer, int err, bool timed_out) {
  if (timed_out) throw TimedOut(std::string("[dist] timed out ") + what + " " + peer);
  if (err == 0 || err == ECONNRESET || err == EPIPE) {
    const std::string verb(what, std::strcspn(what, " "));  // "receiving from" -> "receiving"
    throw Error(std::string("[dist] connection to ") + peer + " closed while " + verb +
                " (that process exited or was killed)");
  }
  throw Error(std::string("[dist] ") + what + " " + peer + " failed: " + std::strerror(err));
}

// TCP_RTO_MAX_MS (Linux 6.15): the socket's largest retransmission timeout, which also
// bounds the intervals between probes of a closed window. Newer than this libc's headers.
constexpr int kTcpRtoMaxMs = 44;

void watch_link(const Socket& s, std::chrono::seconds limit) {
  if (limit.count() <= 0 || !s.valid()) return;
  const int on = 1, probes = 3;
  const int idle = std::max<int>(1, int(limit.count() / 2)), interval = std::max<int>(1, int(limit.count() / 6));
  ::setsockopt(s.fd(), SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  ::setsockopt(s.fd(), IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(s.fd(), IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(s.fd(), IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
  // A closed receive window is probed at intervals that double up to TCP's largest
  // retransmission timeout, 2 minutes: a machine that dies while its window is closed would
  // be found only at the next probe. Capped at a third of the limit (1 s at least, as the
  // kernel requires), a probe goes unanswered soon enough for link_silence_ms to see it.
  // Live peers answer each probe, so they are probed more often, never taken for lost.
  // Kernels before Linux 6.15 lack the option and refuse it; they keep the longer intervals.
  const int rto_max_ms = int(std::clamp<int64_t>(int64_t(limit.count()) * 1000 / 3, 1000, 120000));
  ::setsockopt(s.fd(), IPPROTO_TCP, kTcpRtoMaxMs, &rto_max_ms, sizeof rto_max_ms);
}

int64_t link_silence_ms(int fd) {
  tcp_info info{};
  socklen_t len = sizeof info;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return 0;
  // tcpi_unacked: segments sent and not acknowledged; tcpi_probes: window or keepalive
  // probes sent since the last answer. tcpi_last_ack_recv: ms since anything was acknowledged.
  if (info.tcpi_unacked == 0 && info.tcpi_probes == 0) return 0;
  return int64_t(info.tcpi_last_ack_recv);
}

std::string jumbo_frames_note(int fd) {
  tcp_info info{};
  socklen_t len = sizeof info;
  // 1460: the largest segment a 1500-byte MTU carries (1500 less 20 of IP and 20 of TCP).
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0 || info.tcpi_snd_mss <= 1460) return "";
  return ". If that machine is up: this connection sends segments of " + std::to_string(info.tcpi_snd_mss) +
         " bytes (a path MTU of " + std::to_string(info.tcpi_pmtu) +
         "), and a link or switch between the machines with a smaller MTU drops every such packet while small "
         "messages pass (an MTU mismatch): give every machine's interface and the network between them the same "
         "MTU (ip link show; ip link set DEV mtu N)";
}

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Socket::shutdown() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

namespace {
void tune(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // small messages go out at once
  const int buf = 4 << 20;  // large socket buffers keep a ring step's bytes in flight
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

}  // namespace

Socket Socket::connect(const std::string& host, int port, Deadline deadline, const std::string& peer) {
  const sockaddr_in addr = resolve_until(host, port, deadline, peer);
  const std::string where = host + ":" + std::to_string(port);
  // A connection is answered within a round trip: accepted, or refused by a machine with
  // nothing on the port (then tried again: the server may not be listening yet). No answer
  // at all is a machine that is down or unreachable, or a firewall that drops the port: said
  // once, a third of the way to the deadline (10 s at most), as the wait goes on.
  const auto start = Clock::now();
  const Deadline warn_at = start + std::min<Clock::duration>(std::chrono::seconds(10), (deadline - start) / 3);
  bool warned = false, refusal_said = false;
  std::string last = "no attempt";
  while (true) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 && (errno == EMFILE || errno == ENFILE))
      throw OutOfFiles("[dist] cannot open a connection to " + peer + ": " + std::strerror(errno) +
                       open_files_note(errno));
    ENGINE_REQUIRE(fd >= 0, "[dist] socket() failed: ", std::strerror(errno));
    Socket s(fd);
    tune(fd);
    int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
    if (rc != 0 && errno == EINPROGRESS) {
      bool answered = wait_fd(fd, true, warned ? deadline : std::min(deadline, warn_at));
      if (!answered && !warned && Clock::now() < deadline) {
        warned = true;
        std::fprintf(stderr,
                     "[dist] %s at %s has not answered a connection for %.0f s: its machine is down or "
                     "unreachable, or a firewall drops port %d (between machines, open MASTER_PORT and the ports "
                     "the ranks listen on, which ENGINE_PORT_RANGE chooses); trying until the timeout\n",
                     peer.c_str(), where.c_str(), std::chrono::duration<double>(Clock::now() - start).count(), port);
        answered = wait_fd(fd, true, deadline);
      }
      if (answered) {
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        rc = err == 0 ? 0 : -1;
        errno = err;
      } else {
        errno = ETIMEDOUT;
      }
    }
    if (rc == 0) return s;
    const int err = errno;
    last = std::strerror(err);
    // Refused all along: its server has not started yet, or listens on another port (a
    // MASTER_PORT typed differently on one machine would otherwise wait out the timeout in
    // silence). Said once, as the silence above is.
    if (err == ECONNREFUSED && !refusal_said && Clock::now() >= warn_at && Clock::now() < deadline) {
      refusal_said = true;
      std::fprintf(stderr,
                   "[dist] %s at %s has refused connections for %.1f s: nothing listens on port %d of that "
                   "machine (not started yet? if it has, is the port the same on every machine: MASTER_PORT, "
                   "--master_port, --rdzv_endpoint? a firewall that rejects the port looks the same); trying until "
                   "the timeout\n",
                   peer.c_str(), where.c_str(), std::chrono::duration<double>(Clock::now() - start).count(), port);
    }
    if (Clock::now() >= deadline)
      throw Error("[dist] could not connect to " + peer + " at " + where + " before the timeout (last error: " + last +
                  (err == ETIMEDOUT ? "); nothing answered: is its machine up and reachable, and the port open?"
                                    : "); is it running, and are the address and port right?"));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the server may not be listening yet
  }
}

void Socket::send_all(const void* data, size_t n, Deadline deadline, const std::string& peer) const {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::send(fd_, p, n, MSG_NOSIGNAL);
    if (w > 0) {
      p += w, n -= size_t(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_fd(fd_, true, deadline)) throw_io_error("sending to", peer, 0, true);
      continue;
    }
    throw_io_error("sending to", peer, errno, false);
  }
}

void Socket::recv_all(void* data, size_t n, Deadline deadline, const std::string& peer) const {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::recv(fd_, p, n, 0);
    if (r > 0) {
      p += r, n -= size_t(r);
      continue;
    }
    if (r == 0) throw_io_error("receiving from", peer, 0, false);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_fd(fd_, false, deadline)) throw_io_error("waiting for", peer, 0, true);
      continue;
    }
    throw_io_error("receiving from", peer, errno, false);
  }
}

Listener Listener::bind(const std::string& host, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ENGINE_REQUIRE(fd >= 0, "[dist] socket() failed: ", std::strerror(errno));
  Listener l;
  l.sock_ = Socket(fd);
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr = resolve(host, port);
  // With SO_REUSEADDR two processes can both bind one port; the second then fails in
  // listen(). Either way it is the same mistake, and gets the same words.
  const bool bound = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  // The longest queue of connections not yet accepted that the kernel allows (its
  // net.core.somaxconn): every rank of a job connects to rank 0's store and listener at
  // once, and past the queue a connection waits for SYN-ACK retries (1, 3, 7, 15 s ...) and
  // is reset after about 30 s.
  if (!bound || ::listen(fd, SOMAXCONN) != 0) {
    const int err = errno;
    std::string why;
    if (err == EADDRINUSE)
      why =
          " (another process, perhaps another job, holds this port: give this job another MASTER_PORT, or omit "
          "--master_port and the launcher picks a free one)";
    if (err == EADDRNOTAVAIL)  // e.g. --node_rank=0 given to a machine other than MASTER_ADDR's
      why = " (" + host + " is not an address of this machine, which has " + machine_addresses() +
            ": rank 0 serves the rendezvous at MASTER_ADDR, so it runs on the machine with that address, the one "
            "given --node_rank=0)";
    if (err == EACCES)
      why = " (ports below " + std::to_string(unprivileged_port_start()) +
            ", net.ipv4.ip_unprivileged_port_start, are for root or CAP_NET_BIND_SERVICE: choose a port from there "
            "to 65535, as 29500)";
    throw BindError("[dist] cannot listen on " + host + ":" + std::to_string(port) + ": " + std::strerror(err) + why,
                    err);
  }
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  l.port_ = ntohs(addr.sin_port);
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  return l;
}

int unprivileged_port_start() {
  std::ifstream in("/proc/sys/net/ipv4/ip_unprivileged_port_start");
  int start = 1024;
  in >> start;
  return start;
}

Listener bind_in_range(const std::string& host, int lo, int hi) {
  int reserved = 0;  // ports this process may not use (EACCES), the rest were taken
  for (int port = lo; port <= hi; ++port) {
    try {
      return Listener::bind(host, port);
    } catch (const BindError& e) {  // taken, or reserved for root: try the next one
      if (e.err() != EADDRINUSE && e.err() != EACCES) throw;
      reserved += e.err() == EACCES;
    }
  }
  const std::string range = "ENGINE_PORT_RANGE " + std::to_string(lo) + "-" + std::to_string(hi);
  if (reserved == hi - lo + 1)
    throw Error("[dist] cannot listen on " + host + ": every port in " + range + " is below " +
                std::to_string(unprivileged_port_start()) +
                " (net.ipv4.ip_unprivileged_port_start), for root or CAP_NET_BIND_SERVICE only: choose ports from "
                "there to 65535, as 29600-29700");
  throw Error("[dist] cannot listen on " + host + ": every port in " + range + " is taken" +
              (reserved ? " (" + std::to_string(reserved) + " of them, below " +
                              std::to_string(unprivileged_port_start()) + ", are for root only)"
                        : "") +
              " (widen the range; each rank needs one port)");
}

Socket Listener::accept(Deadline deadline) const {
  while (true) {
    const int fd = ::accept4(sock_.fd(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) {
      tune(fd);
      return Socket(fd);
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno == EMFILE || errno == ENFILE)
      throw OutOfFiles(std::string("[dist] cannot accept a connection: ") + std::strerror(errno) +
                       open_files_note(errno));
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      throw Error(std::string("[dist] accept failed: ") + std::strerror(errno));
    if (!wait_fd(sock_.fd(), false, deadline)) throw Error("[dist] timed out waiting for a peer to connect");
  }
}

}  // namespace engine::dist
