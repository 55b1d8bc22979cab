// The file:// rendezvous (file_rendezvous.h).
#include "dist/file_rendezvous.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "dist/addresses.h"
#include "tensor/check.h"
#include "tensor/input_file.h"
#include "tensor/new_file.h"

namespace engine::dist {

namespace {

// What rank 0 wrote.
struct Published {
  std::string host;
  int port = 0;
  std::string network;                 // "" where rank 0 wrote none (one machine, or MASTER_ADDR)
  std::vector<std::string> addresses;  // its machine's addresses, for other machines
};

// Rank 0's side: the store, and the file that says where it is.
std::shared_ptr<TCPStore> serve(const std::string& path, bool other_machines, StoreOptions so) {
  const char* given = std::getenv("MASTER_ADDR");
  std::string host = given && *given ? given : "127.0.0.1";
  // Other machines cannot dial a loopback address: the store then listens on every
  // interface (a host name this machine maps to loopback is kept: the mesh reads it so),
  // and the file lists the addresses they may dial.
  const bool list = other_machines && loopback_here(host);
  if (list && !loopback_only_here(host)) host = "0.0.0.0";
  so.listen_host = listen_address(host, other_machines);
  auto store = std::make_shared<TCPStore>(host, 0, true, so);
  std::string text = host + ":" + std::to_string(store->port()) + "\n";
  if (list) {
    text += "network " + network_id() + "\n";
    for (const std::string& a : reachable_addresses()) text += "address " + a + "\n";
  }
  const std::string tmp = leave_room(path, 15) + ".tmp." + std::to_string(::getpid());
  const int fd = create_new_file(tmp);  // the folder is shared: never through a link put there
  const bool written = fd >= 0 && write_all(fd, text.data(), text.size());
  const std::string why = write_error_words(errno);
  if (fd >= 0) ::close(fd);
  if (!written) {
    if (fd >= 0) ::unlink(tmp.c_str());  // whatever part of it was made
    throw Error("[init_process_group] cannot write the rendezvous file " + tmp + ": " + why);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    throw Error("[init_process_group] cannot write the rendezvous file " + path + ": " + why);
  }
  return store;
}

// The file's contents; false while it is missing, empty, or not yet a regular file (a named
// pipe left at the name would block the read for good; rank 0's rename replaces it).
bool read_published(const std::string& path, Published* p) {
  if (!engine::not_a_file(path).empty()) return false;
  // Read from outside: at most 64 KiB of it, 64 addresses (a machine's interfaces fit).
  std::ifstream in(path, std::ios::binary);
  std::string text(64 << 10, '\0');
  in.read(text.data(), std::streamsize(text.size()));
  text.resize(size_t(in.gcount()));
  std::istringstream lines(text);
  std::string first;
  if (!(lines >> first)) return false;
  parse_host_port(first, "the rendezvous file " + path, &p->host, &p->port);
  std::string line;
  while (std::getline(lines, line) && p->addresses.size() < 64) {
    std::istringstream words(line);
    std::string key, value;
    if (!(words >> key >> value)) continue;
    if (key == "network") p->network = value;
    if (key == "address") p->addresses.push_back(value);
  }
  return true;
}

// This rank's side of the comparison: its network and its machine's addresses.
struct Here {
  std::string network = network_id();
  std::vector<std::string> addresses = reachable_addresses();
};

// The hosts this rank tries, in order, and why there are none where so.
std::vector<std::string> candidates(const Published& p, const Here& here, std::string* none) {
  if (p.network.empty() || p.network == here.network) return {p.host};
  std::vector<std::string> hosts;
  if (p.host != "0.0.0.0" && !loopback_here(p.host)) hosts.push_back(p.host);  // MASTER_ADDR's name, say
  std::string skipped;
  for (const std::string& a : p.addresses) {
    if (std::find(here.addresses.begin(), here.addresses.end(), a) != here.addresses.end())
      skipped += (skipped.empty() ? "" : ", ") + a;
    else if (std::find(hosts.begin(), hosts.end(), a) == hosts.end())
      hosts.push_back(a);
  }
  if (hosts.empty())
    *none = "rank 0 runs on another machine, and it listed no address this machine could dial (" +
            (p.addresses.empty() ? std::string("none at all") : "only " + skipped + ", which this machine has too") +
            "): set MASTER_ADDR on rank 0 to the address other machines reach it at";
  return hosts;
}

}  // namespace

std::shared_ptr<TCPStore> file_rendezvous(const std::string& path, int rank, bool other_machines, StoreOptions so,
                                          std::string* remove) {
  ENGINE_REQUIRE(!path.empty() && path.back() != '/', "[init_process_group] init_method \"file://", path,
                 "\" names no file: give one on a file system every rank sees, as file:///shared/rendezvous");
  // Rank 0 renames its file onto the name and removes it at the end: file:///dev/null would
  // have taken /dev/null from every program on the machine. Refused on every rank, at once.
  const std::string special = engine::special_file_at(path);
  ENGINE_REQUIRE(special.empty(), "[init_process_group] init_method \"file://", path, "\" names ", special,
                 ", not a file: rank 0 puts its own file in its place and removes it at the end; give a file on a "
                 "file system every rank sees, as file:///shared/rendezvous");
  if (rank == 0) {
    auto store = serve(path, other_machines, so);
    *remove = path;
    return store;
  }
  const Deadline d = deadline_in(so.timeout);
  const Here here;
  std::string last_error =
      "it never appeared: rank 0 has not started, or this folder is not on a file system this machine shares with "
      "rank 0's";
  while (Clock::now() < d) {
    Published p;
    if (read_published(path, &p)) {
      // A stale file from an earlier run points at a dead port: each host is tried briefly
      // (never past the deadline), then the file is read again.
      for (const std::string& host : candidates(p, here, &last_error)) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(d - Clock::now());
        if (left.count() <= 0) break;
        StoreOptions quick = so;
        quick.timeout = std::min({so.timeout, std::chrono::milliseconds(2000), left});
        try {
          auto store = std::make_shared<TCPStore>(host, p.port, false, quick);
          store->set_timeout(so.timeout);
          return store;
        } catch (const Error& e) {
          last_error = e.what();
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  throw Error("[init_process_group] timed out waiting for rank 0's address in " + path + " (" + last_error + ")");
}

}  // namespace engine::dist
