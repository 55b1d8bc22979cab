// Sockets and listeners (dist/socket.h): what the kernel does with connections a busy
// listener has not accepted yet, running out of file descriptors, and host names.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <exception>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "dist/addresses.h"
#include "dist/open_files.h"
#include "dist/socket.h"

using namespace engine::dist;
using namespace std::chrono_literals;

TEST_CASE("hundreds of ranks connecting at once to a busy listener all get in when it accepts") {
  // Every rank of a job connects to rank 0's store and listener at once. With a queue of
  // 128, the kernel dropped the 129th connection's handshake and left it to retry after
  // 1, 3, 7 ... s (and reset it after about 30 s if rank 0 was still busy).
  if (!raise_open_files(1000)) {
    std::cout << "SKIPPED: 400 connections (the hard limit on open files here is below 1000)" << std::endl;
    WARN("SKIPPED: the hard limit on open files is below 1000 here");
    return;
  }
  Listener listener = Listener::bind("127.0.0.1", 0);
  std::vector<Socket> clients, accepted;
  for (int i = 0; i < 400; ++i)
    clients.push_back(Socket::connect("127.0.0.1", listener.port(), deadline_in(5s), "the listener"));
  const Deadline d = deadline_in(500ms);
  while (accepted.size() < clients.size()) accepted.push_back(listener.accept(d));
  CHECK(accepted.size() == 400);
}

TEST_CASE("a process out of file descriptors names the limit") {
  rlimit saved{};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &saved) == 0);
  Listener listener = Listener::bind("127.0.0.1", 0);
  Socket client = Socket::connect("127.0.0.1", listener.port(), deadline_in(5s), "the listener");
  const int64_t open = open_files();
  REQUIRE(open > 0);
  // Nothing but the calls runs while no descriptor is left: a sanitizer's runtime needs one
  // to check a virtual call (UBSan's vptr check opens a pipe), so what they throw is kept
  // whole and read afterwards.
  std::exception_ptr accepting, connecting;
  rlimit tight = saved;
  tight.rlim_cur = rlim_t(open);  // not one more
  const bool tightened = setrlimit(RLIMIT_NOFILE, &tight) == 0;
  try {
    listener.accept(deadline_in(1s));
  } catch (...) {
    accepting = std::current_exception();
  }
  try {
    Socket::connect("127.0.0.1", listener.port(), deadline_in(1s), "rank 3");
  } catch (...) {
    connecting = std::current_exception();
  }
  REQUIRE(setrlimit(RLIMIT_NOFILE, &saved) == 0);
  REQUIRE(tightened);
  std::string accept_error, connect_error;
  bool out_of_files = false;
  try {
    if (accepting) std::rethrow_exception(accepting);
  } catch (const OutOfFiles& e) {
    out_of_files = true, accept_error = e.what();
  }
  try {
    if (connecting) std::rethrow_exception(connecting);
  } catch (const std::exception& e) {
    connect_error = e.what();
  }
  CHECK(out_of_files);
  CHECK_THAT(accept_error, Catch::Contains("cannot accept a connection: Too many open files (this process has as "
                                           "many files open as it may, " +
                                           std::to_string(open) + ": ulimit -n)"));
  CHECK_THAT(connect_error, Catch::Contains("cannot open a connection to rank 3: Too many open files"));
  Socket late = listener.accept(deadline_in(1s));  // the connection that waited is still there
  CHECK(late.valid());
}

TEST_CASE("the soft limit is raised up to the hard one; past it, the error says what to raise") {
  // In a child: a hard limit lowered cannot be raised again without privileges.
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const int64_t open = open_files();
    rlimit tight{rlim_t(open + 2), rlim_t(open + 20)};
    if (setrlimit(RLIMIT_NOFILE, &tight) != 0) _exit(10);
    if (!raise_open_files(10)) _exit(11);  // within the hard limit: raised
    rlimit now{};
    if (getrlimit(RLIMIT_NOFILE, &now) != 0 || now.rlim_cur != rlim_t(open + 10)) _exit(12);
    if (raise_open_files(50)) _exit(13);  // past it
    try {
      reserve_open_files(50, "rank 0 of 64");
      _exit(14);
    } catch (const engine::Error& e) {
      const std::string m = e.what();
      const bool named = m.find("rank 0 of 64 needs about " + std::to_string(open + 50) + " open files") == 0 &&
                         m.find("cannot raise that past its hard limit, " + std::to_string(open + 20) +
                                ": raise both (ulimit -n " + std::to_string(open + 50)) != std::string::npos;
      _exit(named ? 0 : 15);
    }
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);  // 10-15: which step failed
}

TEST_CASE("a host name that does not resolve is looked up again until the deadline, then named") {
  // A cluster's DNS may learn the master's name only once its machine is up, after the
  // others' ranks start: they keep looking it up (as PyTorch's store does) until the deadline.
  // ".invalid" never resolves (RFC 6761).
  const auto start = Clock::now();
  std::string error;
  try {
    Socket::connect("nosuch.invalid", 29500, deadline_in(1s), "the rendezvous store (rank 0)");
  } catch (const engine::Error& e) {
    error = e.what();
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  CHECK(seconds >= 0.9);
  CHECK(error.find("could not resolve \"nosuch.invalid\", the host of the rendezvous store (rank 0), before the "
                   "timeout") != std::string::npos);
  // Addresses the engine cannot use, and what no resolver can find, fail at once, whatever
  // the deadline.
  const auto again = Clock::now();
  CHECK_THROWS_WITH(Socket::connect("::1", 29500, deadline_in(60s), "rank 0"),
                    Catch::Contains("is an IPv6 address; the engine's sockets speak IPv4 only"));
  CHECK_THROWS_WITH(
      Socket::connect("127.0.0.1 ", 29500, deadline_in(60s), "rank 0"),
      Catch::Contains("\"127.0.0.1 \" is not a host name or IPv4 address: it holds a space at position 9"));
  CHECK_THROWS_WITH(Socket::connect("node0:29500", 29500, deadline_in(60s), "rank 0"),
                    Catch::Contains("it holds ':' at position 5"));
  CHECK_THROWS_WITH(Socket::connect("", 29500, deadline_in(60s), "rank 0"), Catch::Contains("it is empty"));
  CHECK(std::chrono::duration<double>(Clock::now() - again).count() < 10);
}

TEST_CASE("servers for a name this machine maps to a loopback address listen on every interface") {
  // Debian maps a machine's own name to 127.0.1.1; other machines dial its real address.
  CHECK(listen_address("127.0.0.1", true) == "127.0.0.1");
  CHECK(listen_address("localhost", true) == "localhost");  // a name no other machine could mean
  CHECK(listen_address("10.1.2.3", true) == "10.1.2.3");
  char name[256] = {};
  REQUIRE(::gethostname(name, sizeof name - 1) == 0);
  if (loopback_only_here(name)) {
    CHECK(listen_address(name, true) == "0.0.0.0");
    CHECK(listen_address(name, false) == name);  // every rank on this machine: loopback is enough
  }
  CHECK(listen_address("0.0.0.0", true) == "0.0.0.0");
  CHECK(loopback_only_here("0.0.0.0"));  // every interface: other machines dial a real address
  CHECK(loopback_here("localhost"));
  CHECK(!loopback_only_here("localhost"));
  CHECK(!loopback_here("::1"));  // not IPv4: no answer rather than an error
  CHECK(route_source("127.0.0.1").rfind("127.", 0) == 0);
  CHECK(route_source("not an address").empty());
}

TEST_CASE("listening on an address this machine does not have names the machine's addresses") {
  // --node_rank=0 given to the wrong machine: rank 0 cannot listen at MASTER_ADDR there.
  // 198.51.100.0/24 is set aside for documentation (RFC 5737): no machine has it.
  CHECK_THROWS_WITH(Listener::bind("198.51.100.77", 0),
                    Catch::Contains("cannot listen on 198.51.100.77:0") &&
                        Catch::Contains("(198.51.100.77 is not an address of this machine, which has ") &&
                        Catch::Contains("lo (127.0.0.1)") &&
                        Catch::Contains("so it runs on the machine with that address, the one given --node_rank=0)"));
  CHECK_THROWS_WITH(interface_address("nosuch0"),
                    Catch::Contains("ENGINE_SOCKET_IFNAME=nosuch0: no interface of that name with an IPv4 address "
                                    "here; this machine has: ") &&
                        Catch::Contains("lo (127.0.0.1)") && !Catch::Contains("NCCL") && !Catch::Contains("GLOO"));
  // The forms other libraries' variables take: gloo's list, NCCL's prefix, exclusion and exact match.
  CHECK_THROWS_WITH(interface_address("lo,nosuch0"),
                    Catch::EndsWith("(one interface name: a list, as GLOO_SOCKET_IFNAME takes, is not read here)"));
  CHECK_THROWS_WITH(interface_address("l"), Catch::EndsWith("(a whole name: NCCL_SOCKET_IFNAME matches prefixes, this "
                                                            "variable does not; lo begins with it)"));
  CHECK_THROWS_WITH(
      interface_address("^docker"),
      Catch::EndsWith("(one whole interface name: NCCL_SOCKET_IFNAME's ^ and = forms are not read here)"));
  CHECK(interface_address("lo") == "127.0.0.1");
}

namespace {
// What `body` writes to stderr, run in a child (which it may change: its user, its
// stderr); "" when body returns false (it could not do what it needed).
std::string in_child(const std::function<bool()>& body) {
  int fds[2];
  if (pipe(fds) != 0) return "";
  const pid_t child = fork();
  if (child == 0) {
    close(fds[0]);
    dup2(fds[1], 2);
    _exit(body() ? 0 : 2);
  }
  close(fds[1]);
  std::string got;
  char buf[512];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) got.append(buf, size_t(n));
  close(fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? got : "";
}

// What Listener::bind(127.0.0.1, 80) and bind_in_range(127.0.0.1, 100, 110) say to a
// process that is not root (user nobody), one line each; "" when this process cannot
// become nobody.
std::string unprivileged_listen_errors() {
  return in_child([] {
    if (setgid(65534) != 0 || setuid(65534) != 0) return false;
    for (int which = 0; which < 2; ++which) {
      try {
        if (which == 0) Listener::bind("127.0.0.1", 80);
        if (which == 1) bind_in_range("127.0.0.1", 100, 110);
        std::fprintf(stderr, "listened\n");
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s\n", e.what());
      }
    }
    return true;
  });
}

// What Socket::connect writes to stderr and throws, dialling 127.0.0.1:port for `seconds`.
std::string connect_output(int port, double seconds) {
  return in_child([=] {
    try {
      Socket::connect("127.0.0.1", port, Clock::now() + std::chrono::milliseconds(int(seconds * 1000)), "the probe");
      std::fprintf(stderr, "connected\n");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "threw: %s\n", e.what());
    }
    return true;
  });
}
}  // namespace

TEST_CASE("a port reserved for root is named as such, not as taken") {
  if (getuid() != 0 || unprivileged_port_start() <= 110) {
    std::cout << "SKIPPED: ports for root only (not root here, or net.ipv4.ip_unprivileged_port_start is "
              << unprivileged_port_start() << ")" << std::endl;
    return;
  }
  const std::string said = unprivileged_listen_errors();
  if (said.empty()) {  // Bazel's sandbox maps only root into its user namespace
    std::cout << "SKIPPED: ports for root only (this process cannot become user nobody here)" << std::endl;
    WARN("SKIPPED: cannot become user nobody here");
    return;
  }
  INFO(said);
  // MASTER_PORT=80 for a user's job: the store cannot listen there.
  CHECK_THAT(said, Catch::Contains("cannot listen on 127.0.0.1:80: Permission denied (ports below 1024, "
                                   "net.ipv4.ip_unprivileged_port_start, are for root or CAP_NET_BIND_SERVICE"));
  // ENGINE_PORT_RANGE=100-110: it said "every port ... is taken", though none was.
  CHECK_THAT(said,
             Catch::Contains("every port in ENGINE_PORT_RANGE 100-110 is below 1024") && !Catch::Contains("is taken"));
}

TEST_CASE("a range whose ports are all taken says so") {
  Listener a = Listener::bind("127.0.0.1", 0);
  const int p = a.port();
  CHECK_THROWS_WITH(bind_in_range("127.0.0.1", p, p),
                    Catch::Contains("every port in ENGINE_PORT_RANGE " + std::to_string(p) + "-" + std::to_string(p) +
                                    " is taken (widen the range"));
  CHECK_THROWS_AS(bind_in_range("198.51.100.77", 40000, 40010), BindError);  // not this machine's: not "taken"
}

TEST_CASE("a port that refuses connections all along is said once, before the timeout") {
  // MASTER_PORT typed differently on one machine: the store is never there. It used to be
  // retried in silence until ENGINE_DIST_TIMEOUT (300 s by default).
  int port;
  {
    Listener l = Listener::bind("127.0.0.1", 0);
    port = l.port();
  }  // closed: nothing listens there now
  const std::string said = connect_output(port, 1.5);
  INFO(said);
  const std::string warning = "[dist] the probe at 127.0.0.1:" + std::to_string(port) + " has refused connections for ",
                    why = " s: nothing listens on port " + std::to_string(port) +
                          " of that machine (not started yet? if it has, is the port the same on every machine";
  CHECK(said.find(warning) == 0);  // first, and once
  CHECK(said.find(warning, 1) == std::string::npos);
  CHECK_THAT(said, Catch::Contains(why));
  CHECK_THAT(said, Catch::Contains("threw: [dist] could not connect to the probe at 127.0.0.1:" + std::to_string(port) +
                                   " before the timeout (last error: Connection refused)"));
  // A server that comes within the first third of the wait: nothing said.
  Listener later = Listener::bind("127.0.0.1", 0);
  CHECK(connect_output(later.port(), 1.5) == "connected\n");
}
