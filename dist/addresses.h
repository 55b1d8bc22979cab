// Host names and addresses for the CPU backend's sockets: looking a name up (again, until a
// deadline, where a cluster's DNS learns names late), where a server listens, and which of
// this machine's addresses reaches another.
//
//   sockaddr_in a = resolve_until("node0", 29500, deadline_in(30s), "rank 0's store");
//   // "0.0.0.0" where this machine resolves node0 to 127.0.1.1, else "node0":
//   Listener l = Listener::bind(listen_address("node0", /*other_machines=*/true), 29500);
//   std::string mine = route_source("10.0.0.2");  // this machine's side of the route, e.g. "10.0.0.1"
//
// Only IPv4: an IPv6 address is refused by name, as is a host no resolver could find (a
// stray space, a port in the address).
#pragma once

#include <netinet/in.h>

#include <string>
#include <vector>

#include "dist/socket.h"

namespace engine::dist {

// host's address with port; throws naming the host when it does not resolve.
sockaddr_in resolve(const std::string& host, int port);

// The same, looked up again until the deadline: on a cluster the name of the master's
// machine may be published (DNS, a Kubernetes service) only once that machine has started,
// after the other machines' ranks. Said once on stderr at the first failure, so that a
// mistyped name is seen at once; at the deadline the error names the host and `peer`.
sockaddr_in resolve_until(const std::string& host, int port, Deadline deadline, const std::string& peer);

// The IPv4 address of the network interface `name` (e.g. "eth0"); throws naming it, and
// listing this machine's interfaces, when it has none.
std::string interface_address(const std::string& name);

// "HOST:PORT" split (init_method's tcp://, a file:// rendezvous file); throws naming `what`
// (e.g. "init_method"), and showing at most 80 bytes of `hp`, when it is not that.
void parse_host_port(const std::string& hp, const std::string& what, std::string* host, int* port);

// This machine's IPv4 addresses other machines may dial: every interface's but loopback's,
// in the order the kernel lists them.
std::vector<std::string> reachable_addresses();

// The network this process is in: its boot id and network namespace. Different machines
// differ in the first; containers that share a host's network (hostNetwork pods) are equal
// in both, and reach each other's loopback. "" where either cannot be read.
std::string network_id();

// This machine's interfaces and their IPv4 addresses, for errors: "lo (127.0.0.1), eth0 (10.0.0.1)".
std::string machine_addresses();

// The IPv4 address at the other end of a connected socket, "" when it has none.
std::string remote_address(int fd);

// Whether `host` (an IPv4 address or a name) is a loopback address on this machine (127.x);
// false where it does not resolve.
bool loopback_here(const std::string& host);

// Whether this machine reaches `host` over loopback while other machines dial a real
// address of it: a host name (not "localhost") it resolves to a loopback address, as Debian
// and Ubuntu map a machine's own name to 127.0.1.1 in /etc/hosts; or 0.0.0.0 (every
// interface).
bool loopback_only_here(const std::string& host);

// Where a server for `host` listens: on every interface ("0.0.0.0", as PyTorch's store
// does) where loopback_only_here(host) and clients may come from other machines; otherwise
// at host itself.
std::string listen_address(const std::string& host, bool other_machines);

// The address of this machine's interface that the kernel would send from to reach the IPv4
// address `ip` (its routing table: nothing is sent), "" where there is no route.
std::string route_source(const std::string& ip);

}  // namespace engine::dist
