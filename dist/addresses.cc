// Host names and addresses (addresses.h).
#include "dist/addresses.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>
#include <utility>
#include <vector>

#include "tensor/check.h"

namespace engine::dist {

namespace {
// Why `host` can never be resolved, "" when it may be.
std::string not_a_name(const std::string& host) {
  if (host.empty()) return "it is empty";
  const size_t at = host.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_");
  if (at == std::string::npos) return "";
  const unsigned char c = static_cast<unsigned char>(host[at]);
  char shown[16];
  if (c == ' ')
    std::snprintf(shown, sizeof shown, "a space");
  else if (c < 32 || c >= 127)
    std::snprintf(shown, sizeof shown, "byte 0x%02x", unsigned(c));
  else
    std::snprintf(shown, sizeof shown, "'%c'", c);
  return std::string("it holds ") + shown + " at position " + std::to_string(at);
}

// host's IPv4 address with port, or false with the resolver's reason. An IPv6 address is
// refused at once: no retry can make it an IPv4 one.
bool lookup(const std::string& host, int port, sockaddr_in* addr, std::string* why) {
  *addr = sockaddr_in{};
  addr->sin_family = AF_INET;
  addr->sin_port = htons(uint16_t(port));
  if (::inet_pton(AF_INET, host.c_str(), &addr->sin_addr) == 1) return true;
  in6_addr v6{};
  const std::string bare =
      host.size() > 2 && host.front() == '[' && host.back() == ']' ? host.substr(1, host.size() - 2) : host;
  ENGINE_REQUIRE(::inet_pton(AF_INET6, bare.c_str(), &v6) != 1, "[dist] \"", host,
                 "\" is an IPv6 address; the engine's sockets speak IPv4 only: give an IPv4 address, or a host name "
                 "that has one");
  // What no resolver can ever find fails at once, not at the timeout (a stray space in MASTER_ADDR).
  const std::string why_not = not_a_name(host);
  ENGINE_REQUIRE(why_not.empty(), "[dist] \"", host, "\" is not a host name or IPv4 address: ", why_not,
                 " (a name holds letters, digits, dots, hyphens and underscores)");
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || !res) {
    *why = rc == EAI_SYSTEM ? std::strerror(errno) : gai_strerror(rc);
    return false;
  }
  addr->sin_addr = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
  ::freeaddrinfo(res);
  return true;
}

}  // namespace

sockaddr_in resolve(const std::string& host, int port) {
  sockaddr_in addr{};
  std::string why;
  ENGINE_REQUIRE(lookup(host, port, &addr, &why), "[dist] cannot resolve host \"", host, "\": ", why);
  return addr;
}

sockaddr_in resolve_until(const std::string& host, int port, Deadline deadline, const std::string& peer) {
  sockaddr_in addr{};
  std::string why;
  for (bool said = false; !lookup(host, port, &addr, &why); said = true) {
    if (Clock::now() >= deadline)
      throw Error("[dist] could not resolve \"" + host + "\", the host of " + peer + ", before the timeout: " + why +
                  "; is the name right, and does this machine's resolver know it?");
    if (!said)
      std::fprintf(stderr,
                   "[dist] cannot resolve \"%s\", the host of %s: %s; looking it up again until the timeout, in "
                   "case its name is published later\n",
                   host.c_str(), peer.c_str(), why.c_str());
    std::this_thread::sleep_for(std::chrono::milliseconds(std::clamp(ms_until(deadline), 0, 200)));
  }
  return addr;
}

namespace {
// Each of this machine's interfaces with an IPv4 address, with it: {name, address}.
std::vector<std::pair<std::string, std::string>> ipv4_interfaces() {
  ifaddrs* list = nullptr;
  ENGINE_REQUIRE(::getifaddrs(&list) == 0, "[dist] cannot list the network interfaces: ", std::strerror(errno));
  std::vector<std::pair<std::string, std::string>> found;
  for (ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
    char buf[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, buf, sizeof buf);
    found.push_back({a->ifa_name, buf});
  }
  ::freeifaddrs(list);
  return found;
}
}  // namespace

void parse_host_port(const std::string& hp, const std::string& what, std::string* host, int* port) {
  const std::string shown = hp.size() > 80 ? hp.substr(0, 80) + "... (" + std::to_string(hp.size()) + " bytes)" : hp;
  const size_t colon = hp.rfind(':');
  ENGINE_REQUIRE(colon != std::string::npos && colon > 0, "[init_process_group] ", what, " \"", shown,
                 "\" should be HOST:PORT");
  *host = hp.substr(0, colon);
  char* end = nullptr;
  const long p = std::strtol(hp.c_str() + colon + 1, &end, 10);
  ENGINE_REQUIRE(*end == '\0' && p >= 0 && p <= 65535, "[init_process_group] ", what, " \"", shown,
                 "\" has an invalid port");
  *port = int(p);
}

std::vector<std::string> reachable_addresses() {
  std::vector<std::string> found;
  for (const auto& [name, address] : ipv4_interfaces())
    if (address.rfind("127.", 0) != 0 && std::find(found.begin(), found.end(), address) == found.end())
      found.push_back(address);
  return found;
}

std::string network_id() {
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(boot, id);
  char ns[64] = {};
  if (id.empty() || readlink("/proc/self/ns/net", ns, sizeof ns - 1) <= 0) return "";
  return id + "/" + ns;
}

std::string machine_addresses() {
  std::string seen;
  for (const auto& [name, address] : ipv4_interfaces())
    seen += (seen.empty() ? "" : ", ") + name + " (" + address + ")";
  return seen;
}

std::string interface_address(const std::string& name) {
  std::string starting;  // an interface whose name begins with `name`, as NCCL's prefixes match
  for (const auto& [interface, address] : ipv4_interfaces()) {
    if (interface == name) return address;
    if (starting.empty() && interface.rfind(name, 0) == 0) starting = interface;
  }
  // The forms the variables of other libraries take, which a user may bring along.
  std::string note;
  if (name.find(',') != std::string::npos)
    note = " (one interface name: a list, as GLOO_SOCKET_IFNAME takes, is not read here)";
  else if (name[0] == '^' || name[0] == '=')
    note = " (one whole interface name: NCCL_SOCKET_IFNAME's ^ and = forms are not read here)";
  else if (!starting.empty())
    note =
        " (a whole name: NCCL_SOCKET_IFNAME matches prefixes, this variable does not; " + starting + " begins with it)";
  throw Error("[init_process_group] ENGINE_SOCKET_IFNAME=" + name +
              ": no interface of that name with an IPv4 address here; this machine has: " + machine_addresses() + note);
}

std::string remote_address(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof addr;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 || addr.sin_family != AF_INET) return "";
  char buf[INET_ADDRSTRLEN] = {};
  return ::inet_ntop(AF_INET, &addr.sin_addr, buf, sizeof buf) ? buf : "";
}

bool loopback_here(const std::string& host) {
  sockaddr_in a{};
  std::string why;
  return not_a_name(host).empty() && lookup(host, 0, &a, &why) && (ntohl(a.sin_addr.s_addr) >> 24) == 127;
}

bool loopback_only_here(const std::string& host) {
  in_addr v4{};
  if (host == "0.0.0.0") return true;
  return host != "localhost" && ::inet_pton(AF_INET, host.c_str(), &v4) != 1 && loopback_here(host);
}

std::string listen_address(const std::string& host, bool other_machines) {
  return other_machines && loopback_only_here(host) ? "0.0.0.0" : host;
}

std::string route_source(const std::string& ip) {
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(9);  // any port: a datagram socket's connect only picks the route
  if (::inet_pton(AF_INET, ip.c_str(), &to.sin_addr) != 1) return "";
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  sockaddr_in from{};
  socklen_t len = sizeof from;
  char buf[INET_ADDRSTRLEN] = {};
  const bool ok = ::connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof to) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&from), &len) == 0 &&
                  ::inet_ntop(AF_INET, &from.sin_addr, buf, sizeof buf);
  ::close(fd);
  return ok ? buf : "";
}

}  // namespace engine::dist
