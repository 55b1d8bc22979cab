// A free TCP port held for the length of a test, for a store or launcher the test starts
// on it later.
//
//   engine::testing::HeldPort port;          // bound, not listening
//   setenv("MASTER_PORT", port.str().c_str(), 1);
//   ... start the job; its rank 0 listens on port.number() ...
//
//   const int p = engine::testing::held_port();   // the same, held until the program ends
//
// A port found free and released at once (bind to port 0, read it, close) can be given to
// any other process's bind(port 0) before the test uses it: a test running beside it (CI
// runs two) then owns it, and this test's clients connect there. Held instead (bound with
// SO_REUSEADDR, never listening), connecting to it is refused until the test's own server
// listens, no bind(port 0) is given it, and that server, which binds with SO_REUSEADDR too,
// can still listen on it. Forked children inherit the hold.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <string>

namespace engine::testing {

class HeldPort {
 public:
  HeldPort() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int one = 1;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd_ < 0 || ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw std::runtime_error(std::string("HeldPort: cannot hold a port: ") + std::strerror(errno));
    port_ = ntohs(a.sin_port);
  }
  ~HeldPort() { ::close(fd_); }
  HeldPort(const HeldPort&) = delete;
  HeldPort& operator=(const HeldPort&) = delete;

  int number() const { return port_; }
  std::string str() const { return std::to_string(port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// A port held until the test program ends: for tests that pass the number around.
inline int held_port() {
  static std::mutex mu;
  static std::deque<HeldPort> held;  // a deque never moves what it holds
  std::lock_guard<std::mutex> lock(mu);
  return held.emplace_back().number();
}

}  // namespace engine::testing
