// TCP sockets with deadlines: the only way the CPU backend talks between processes.
//
//   Listener l = Listener::bind("127.0.0.1", 0);      // port 0: the kernel picks a free one
//   Socket s = Socket::connect("127.0.0.1", l.port(), deadline_in(30s), "rank 0's store");
//   Socket c = l.accept(deadline_in(30s));
//   s.send_all(buf, n, deadline, "rank 1");
//   c.recv_all(buf, n, deadline, "rank 0");
//
// Every blocking call takes a deadline and throws engine::Error when it passes, or when the
// peer closes or resets the connection, naming `peer` (what is on the other end) so that
// the error says who stopped answering. Host names and addresses: dist/addresses.h.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "dist/stop_clock.h"
#include "tensor/check.h"

namespace engine::dist {

using Deadline = Clock::time_point;
inline Deadline deadline_in(std::chrono::milliseconds d) { return Clock::now() + d; }

// How long any wait of a job may take: ENGINE_DIST_TIMEOUT seconds (1 to a week), 300 when
// unset. The ranks (init_process_group) and the launchers read it alike; `who` starts the
// error that names a bad value.
std::chrono::milliseconds timeout_from_env(const char* who);

// A read or write that met its deadline (the others are plain Errors): callers that must
// tell "nothing came" from "the peer hung up" catch it apart.
class TimedOut : public Error {
 public:
  using Error::Error;
};

// A connection whose other end's machine stopped answering at the network level for the
// link timeout (ENGINE_LINK_TIMEOUT): its machine, or the network to it, is gone.
class LinkLost : public Error {
 public:
  using Error::Error;
};

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() { close(); }

  // Connects to host:port, retrying refused connections until the deadline (the server
  // may not be up yet). Throws naming `peer`, the address and the last error.
  static Socket connect(const std::string& host, int port, Deadline deadline, const std::string& peer);

  void send_all(const void* data, size_t n, Deadline deadline, const std::string& peer) const;
  void recv_all(void* data, size_t n, Deadline deadline, const std::string& peer) const;
  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  void close();
  void shutdown();  // wakes any thread blocked on this socket (used at teardown)

 private:
  int fd_ = -1;
};

// Listener::bind's failure, with the errno: bind_in_range goes on past a port that is
// taken (EADDRINUSE) or reserved for root (EACCES), not past any other failure.
class BindError : public Error {
 public:
  BindError(const std::string& what, int err) : Error(what), errno_(err) {}
  int err() const { return errno_; }

 private:
  int errno_;
};

// The lowest port a process without root (CAP_NET_BIND_SERVICE) may listen on:
// net.ipv4.ip_unprivileged_port_start, 1024 unless changed.
int unprivileged_port_start();

class Listener {
 public:
  // Listens on host:port (port 0: any free port). host "0.0.0.0" listens on every interface.
  static Listener bind(const std::string& host, int port);
  Listener() = default;
  Listener(Listener&&) noexcept = default;
  Listener& operator=(Listener&&) noexcept = default;

  Socket accept(Deadline deadline) const;
  int port() const { return port_; }
  int fd() const { return sock_.fd(); }
  void close() { sock_.close(); }

 private:
  Socket sock_;
  int port_ = 0;
};

// Listens on host at the first free port in [lo, hi]; throws naming the range when none is
// (and the ports of it reserved for root, if some are).
Listener bind_in_range(const std::string& host, int lo, int hi);

// A machine that fails hard (power, a kernel panic), or the network to it, closes nothing:
// its connections look alive, and a wait on one would last until the caller's deadline.
// watch_link bounds that by `limit` (0: leaves the socket as it is). A connection waiting to
// receive is probed by TCP keepalive (after limit/2 idle, then every limit/6): when 3 probes
// go unanswered, about `limit` in, the kernel ends it and recv fails with ETIMEDOUT. Data,
// or probes of a closed receive window, left unanswered are what link_silence_ms measures:
// the caller checks it while it waits (the kernel's own bound, TCP_USER_TIMEOUT, would also
// end a connection to a live peer that merely does not read). Probes of a closed window
// are sent at most limit/3 apart (TCP_RTO_MAX_MS, Linux 6.15+; by default they back off to
// 2 minutes apart), so a machine that dies while its window is closed is seen in time.
void watch_link(const Socket& s, std::chrono::seconds limit);

// How long (ms) the other end's machine has left something outstanding on this connection
// unanswered (data not acknowledged, a probe of its closed window, a keepalive probe); 0
// when nothing is outstanding. A live machine's TCP answers within a round trip whether or
// not its process reads, so only a machine or network that is gone lets this grow. A
// caller should see it grow on two looks apart before believing it: a probe just sent is
// outstanding for a round trip.
int64_t link_silence_ms(int fd);

// For a connection found silent by link_silence_ms: words on jumbo frames when it sends
// segments larger than a 1500-byte MTU allows, else "". Two machines with MTU 9000 and a
// link or switch between them with 1500 meet (their small messages pass) and then lose
// every full-size packet: an MTU black hole looks like a machine gone.
std::string jumbo_frames_note(int fd);

// Waits until fd is readable (or writable), or the deadline passes. Returns false on timeout.
bool wait_fd(int fd, bool for_write, Deadline deadline);

// Milliseconds until the deadline, clamped to [0, INT_MAX] for poll().
int ms_until(Deadline deadline);

// Throws the error for a failed read or write: closed, reset, or timed out.
[[noreturn]] void throw_io_error(const char* what, const std::string& peer, int err, bool timed_out);

}  // namespace engine::dist
