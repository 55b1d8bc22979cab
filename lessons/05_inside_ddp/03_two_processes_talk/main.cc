// Inside DDP, step 3: two processes talk. What init_process_group does, by hand: the
// launcher gave each process its RANK, the WORLD_SIZE and the master's address; rank 0
// serves a key-value store there and everyone connects to it. Through the store the
// processes find each other; then a process group connects them directly, and tensors
// travel with send and recv.
//
//   bazel run //lessons/05_inside_ddp:03_two_processes_talk
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "dist/store.h"
#include "dist/tcp_group.h"
#include "tensor/ops.h"
#include "tensor/parse.h"

using namespace engine;

static std::string env(const char* name) {
  const char* v = std::getenv(name);
  if (!v) throw Error(std::string("03_two_processes_talk: ") + name + " is not set: run me through the launcher");
  return v;
}

int main() try {
  const int world = int(parse_int(env("WORLD_SIZE"), "WORLD_SIZE", 1, 1 << 16));
  ENGINE_REQUIRE(world >= 2, "two processes talk: run it on 2 or more (NPROC=2), got WORLD_SIZE=1");
  const int rank = int(parse_int(env("RANK"), "RANK", 0, world - 1));
  dist::StoreOptions so;
  so.token = env("ENGINE_JOB_TOKEN");
  // Rank 0 is the store's server; every rank, rank 0 included, is a client.
  auto store = std::make_shared<dist::TCPStore>(
      env("MASTER_ADDR"), int(parse_int(env("MASTER_PORT"), "MASTER_PORT", 1, 65535)), rank == 0, so);
  store->set("pid/" + std::to_string(rank), std::to_string(getpid()));
  std::string peers;
  for (int r = 0; r < world; ++r) peers += " " + std::to_string(r) + ":" + store->get("pid/" + std::to_string(r));
  std::printf("rank %d of %d: the store says the ranks' pids are%s\n", rank, world, peers.c_str());
  std::fflush(stdout);

  dist::TCPGroupOptions go;
  go.token = so.token;
  dist::ProcessGroupTCP group(store, rank, world, go);  // each rank posts its address; all connect
  // A message around the ring: rank 0 sends [1, 2, 3]; every rank adds 10 * its rank and passes it on.
  Tensor t = rank == 0 ? from_vector(std::vector<float>{1, 2, 3}) : zeros({3});
  if (rank != 0) group.recv(t, rank - 1).wait();
  add_(t, full({3}, 10.0 * rank));
  group.send(t, (rank + 1) % world).wait();
  if (rank == 0) {
    group.recv(t, world - 1).wait();
    std::printf("rank 0 got back [%g, %g, %g] after the message went round %d ranks\n", t.select(0, 0).item(),
                t.select(0, 1).item(), t.select(0, 2).item(), world);
  }
  group.barrier().wait();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
