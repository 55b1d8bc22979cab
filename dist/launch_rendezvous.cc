#include "dist/launch_rendezvous.h"

#include <unistd.h>

#include <cstdio>
#include <string>
#include <thread>

#include "dist/addresses.h"
#include "dist/socket.h"
#include "tensor/check.h"
#include "tensor/parse.h"

namespace engine::dist {

namespace {
// The launchers' store is not a process group's: no rank (whose generation is its restart
// count and destroyed groups, dist.cc) is ever served by it, nor a launcher by a rank's.
constexpr uint32_t kLaunchersGeneration = 0xFFFFFFFFu;

// How --nproc_per_node=auto (cpu, gpu) counted here and there, for a mismatch: it counts
// each machine's own CPUs or GPUs, which may differ. "" where both were numbers.
std::string counted(const std::string& here, const std::string& there) {
  if (here.empty() && there.empty()) return "";
  std::string said = " (";
  if (!here.empty()) said += "here " + here;
  if (!there.empty()) said += std::string(here.empty() ? "" : "; ") + "there " + there;
  return said + ": where the machines differ, give --nproc_per_node a number)";
}

// The flags every launcher of one job must share: with another --nproc_per_node, two
// machines would start the same RANKs; with another --max_restarts, one machine would
// restart alone.
std::string shared_flags(const LaunchArgs& o) {
  return "--nnodes " + std::to_string(o.nnodes) + " --nproc_per_node " + std::to_string(o.nproc_per_node) +
         " --max_restarts " + std::to_string(o.max_restarts);
}
}  // namespace

std::unique_ptr<TCPStore> assign_node_rank(LaunchArgs* o, std::chrono::milliseconds timeout, int prefer) {
  StoreOptions so;
  so.timeout = timeout;
  so.token = o->token;
  so.generation = kLaunchersGeneration;
  so.served_by = "the launcher on the --rdzv_endpoint machine";
  const std::string endpoint = o->master_addr + ":" + std::to_string(o->master_port);
  // Only the machine that has the endpoint's address can listen on it (or, with several
  // launchers on one machine, the first to try). A host name that this machine resolves to
  // a loopback address names this machine: its launcher listens on every interface.
  std::unique_ptr<TCPStore> host;
  StoreOptions served = so;
  served.listen_host = listen_address(o->master_addr, /*other_machines=*/true);
  try {
    host = std::make_unique<TCPStore>(o->master_addr, o->master_port, /*is_server=*/true, served);
  } catch (const Error&) {}
  if (host) {
    o->node_rank = 0;
    o->master_port = Listener::bind(served.listen_host, 0).port();  // free now; rank 0 binds it in every attempt
    host->set("master_port", std::to_string(o->master_port));
    host->set("flags", shared_flags(*o));
    host->set("nproc_from", o->nproc_from);  // for the words only: "" where --nproc_per_node was a number
    return host;
  }
  // Node ranks 1, 2, ... are claimed (TCPStore::claim), each held for as long as its
  // launcher's connection lasts: a machine that fails frees its node rank, and its launcher,
  // started again, takes it back and rejoins.
  std::unique_ptr<TCPStore> store;
  char host_name[256] = {};
  gethostname(host_name, sizeof host_name - 1);
  const std::string me = "pid " + std::to_string(getpid()) + " on " + host_name;
  std::string port, flags, their_count;
  int node = -1;
  try {
    store = std::make_unique<TCPStore>(o->master_addr, o->master_port, /*is_server=*/false, so);
    port = store->get("master_port"), flags = store->get("flags");
    store->try_get("nproc_from", &their_count);
    // Every node rank held: a launcher too many, or one whose machine failed without closing
    // its connection, which the endpoint finds out within ~20 s (store_server.cc): wait
    // until the timeout for one to be freed.
    const Deadline d = deadline_in(timeout);
    for (bool said = false; flags == shared_flags(*o) && node < 0; said = true) {
      if (prefer >= 1 && prefer < o->nnodes && store->claim("node/" + std::to_string(prefer), me) == me) node = prefer;
      for (int k = 1; k < o->nnodes && node < 0; ++k)
        if (store->claim("node/" + std::to_string(k), me) == me) node = k;
      if (node >= 0 || Clock::now() >= d) break;
      if (!said)
        std::fprintf(stderr,
                     "launch: every node rank at %s is held by a running launcher; waiting for one to be freed (a "
                     "machine that failed is noticed within 20 s)\n",
                     endpoint.c_str());
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + " (the node rendezvous at --rdzv_endpoint " + endpoint +
                ": start the launcher on the machine with that address too; it hands out the node ranks)");
  }
  if (flags != shared_flags(*o))
    throw Error("this launcher was started with " + shared_flags(*o) + ", the one serving the rendezvous at " +
                endpoint + " with " + flags + ": start every machine's launcher with the same command" +
                counted(o->nproc_from, their_count));
  if (node < 0)
    throw Error("every node rank of the " + std::to_string(o->nnodes) + " at " + endpoint +
                " (--nnodes) is held by a running launcher: start one launcher per machine, with the same --nnodes "
                "on each");
  o->node_rank = node;
  o->master_port = int(parse_int(port, "the launchers' store's master_port", 1, 65535));
  return store;
}

bool endpoint_serves(TCPStore& store) {
  const auto timeout = store.timeout();
  store.set_timeout(std::chrono::seconds(5));
  bool serves = false;
  try {
    std::string port;
    serves = store.try_get("master_port", &port);
  } catch (const Error&) {}
  store.set_timeout(timeout);
  return serves;
}

}  // namespace engine::dist
