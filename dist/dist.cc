#include "dist/dist.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "dist/addresses.h"
#include "dist/file_rendezvous.h"
#include "dist/launch_notice.h"
#include "dist/nccl_group.h"
#include "dist/open_files.h"
#include "dist/rendezvous_check.h"
#include "dist/same_program.h"
#include "dist/shm_allreduce.h"
#include "dist/socket.h"
#include "dist/store.h"
#include "dist/tcp_group.h"
#include "tensor/check.h"
#include "tensor/parse.h"

namespace engine::dist {

namespace {

constexpr int kMaxWorldSize = 1 << 20;

struct DefaultGroup {
  std::shared_ptr<TCPStore> store;
  std::unique_ptr<ProcessGroup> group;
  LaunchInfo info;
  std::string backend;
  std::string file_to_remove;  // file:// rendezvous: rank 0 removes its file at the end
};
std::unique_ptr<DefaultGroup> g_default;
uint32_t g_destroyed = 0;  // process groups destroyed so far: the store's generation (StoreOptions)
int g_joined_restart = 0;  // the later restart of the job this process joined (StoreOptions::join_later_restart)

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

// Parses an integer environment variable; throws naming it when it is not a number.
int env_int(const char* name, int fallback) {
  const char* v = env(name);
  if (!v) return fallback;
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v, &end, 10);
  ENGINE_REQUIRE(end != v && *end == '\0', "[init_process_group] environment variable ", name, "=\"", v,
                 "\" is not an integer");
  ENGINE_REQUIRE(errno == 0 && x >= INT_MIN && x <= INT_MAX, "[init_process_group] environment variable ", name, "=", v,
                 " is out of range");
  return int(x);
}

// StoreOptions::generation: which incarnation of the process group this is, so that a
// rank never joins a store that rank 0 is closing. The high half is the launcher's restart
// count (after a failure the group starts again, and a new rank on another machine can
// reach the failed attempt's rank 0 before it has gone); the low half counts the process
// groups this process has destroyed (a rank quick to initialise again).
int launcher_restart() {
  const int restart = env_int("TORCHELASTIC_RESTART_COUNT", 0);
  ENGINE_REQUIRE(restart >= 0 && restart <= 0xFFFF, "[init_process_group] TORCHELASTIC_RESTART_COUNT=", restart,
                 " is out of range (0 to 65535)");
  return restart;
}
uint32_t store_generation() { return uint32_t(restart_count()) << 16 | (g_destroyed & 0xFFFF); }

// A machine restarted (or replaced) while the other machines' launchers restarted the job
// starts its launcher afresh, at restart 0. Its ranks join the restart the job is in (the
// store told them: store.h, join_later_restart), or, on the store's machine, the store took
// up the later restart the other ranks came with (store_server.cc, serve_restart_of). Once
// the group has formed, rank 0 seals its store and says at which restart; every rank reads
// it, and the machine's first rank says so when it is not its launcher's.
void agree_on_restart(TCPStore& store, const LaunchInfo& info) {
  const char* key = "restart_of_group";
  if (info.rank == 0) store.set(key, std::to_string(store.seal() >> 16));
  const int job = int(parse_int(store.get(key), "the store's restart_of_group", 0, 0xFFFF)), mine = launcher_restart();
  if (job <= mine) return;
  g_joined_restart = job;
  if (info.local_rank == 0)
    std::fprintf(stderr,
                 "[dist] rank %d: this machine's launcher is at restart %d, the job at restart %d (this machine was "
                 "restarted, or its launcher started afresh): joining the job's restart %d\n",
                 info.rank, mine, job, job);
}

std::chrono::milliseconds resolve_timeout(std::chrono::milliseconds given) {
  return given.count() > 0 ? given : timeout_from_env("[init_process_group]");
}

// The store as init_method says (served here on rank 0), once this rank has passed the
// rendezvous check.
std::shared_ptr<TCPStore> open_store(const std::string& m, const LaunchInfo& info, StoreOptions so,
                                     std::string* remove) {
  // Rank 0 listens on every interface where the address names this machine by a loopback
  // address but other machines may dial it by its real one.
  const bool others = info.world_size > 1 && !(info.local_world_given && info.local_world_size == info.world_size);
  const auto listen_at = [&](const std::string& host) { return info.rank == 0 ? listen_address(host, others) : ""; };
  if (m == "env://") {
    so.listen_host = listen_at(info.master_addr);
    return std::make_shared<TCPStore>(info.master_addr, info.master_port, info.rank == 0, so);
  }
  if (m.rfind("tcp://", 0) == 0) {
    std::string host;
    int port = 0;
    parse_host_port(m.substr(6), "init_method", &host, &port);
    so.listen_host = listen_at(host);
    ENGINE_REQUIRE(port != 0 || info.world_size == 1, "[init_process_group] init_method ", m,
                   " has port 0 with world "
                   "size ",
                   info.world_size, ": the other ranks cannot know which port rank 0 picks; give a fixed port");
    return std::make_shared<TCPStore>(host, port, info.rank == 0, so);
  }
  if (m.rfind("file://", 0) == 0) return file_rendezvous(m.substr(7), info.rank, others, so, remove);
  throw Error("[init_process_group] unknown init_method \"" + m + "\": use env://, tcp://HOST:PORT or file:///PATH");
}

// The store, once this rank has passed the rendezvous check. A machine restarted (or
// replaced) before the other machines noticed that it was lost finds its ranks held in the
// group that is still running there: it waits, reconnecting twice a second, until that
// group's ranks have taken the old ones for lost and restarted (the new store serves a
// later restart, which this rank joins), up to the timeout.
std::shared_ptr<TCPStore> join_rendezvous(const std::string& m, const LaunchInfo& info, const StoreOptions& so,
                                          std::string* remove) {
  const RankClaim mine{info.world_size,
                       env_int("GROUP_RANK", -1),
                       info.local_world_given ? info.local_world_size : -1,
                       env("ENGINE_LAUNCH_ID") ? env("ENGINE_LAUNCH_ID") : "",
                       machine_id(),
                       long(getpid()),
                       program_fingerprint(),
                       program_path()};
  const Deadline d = deadline_in(so.timeout);
  std::string holder;  // who holds this rank in the running group, once one was found
  while (true) {
    try {
      StoreOptions attempt = so;  // connecting, within what is left of the wait
      attempt.timeout = std::max(std::chrono::milliseconds(1),
                                 std::chrono::duration_cast<std::chrono::milliseconds>(d - Clock::now()));
      auto store = open_store(m, info, attempt, remove);
      store->set_timeout(so.timeout);
      const bool waiting = !holder.empty();
      if (check_rendezvous(*store, info.rank, mine, deadline_in(so.timeout), launcher_restart() > 0, &holder) ==
          Rendezvous::kPassed)
        return store;
      if (!waiting && info.local_rank == 0)
        std::fprintf(stderr,
                     "[dist] rank %d: the job's process group is still running with rank %d held by %s, this "
                     "machine's earlier start or the machine it replaces: the others have not yet noticed that it "
                     "was lost. Waiting for the job to restart (they notice within ENGINE_LINK_TIMEOUT)\n",
                     info.rank, info.rank, holder.c_str());
    } catch (const Error&) {
      // While waiting, the running group's rank 0 goes (its ranks took the lost ones for
      // lost), and its store with it, perhaps in the middle of a handshake: try again.
      if (holder.empty() || Clock::now() + std::chrono::milliseconds(500) >= d) throw;
    }
    ENGINE_REQUIRE(Clock::now() + std::chrono::milliseconds(500) < d, "[init_process_group] rank ", info.rank,
                   " is held in the job's running process group by ", holder,
                   " (from another start of this machine, or another machine), and the job did not restart within "
                   "the timeout: if that machine is gone, the others take it for lost within ENGINE_LINK_TIMEOUT "
                   "and restart if their launchers' --max_restarts allows; if it is running, two machines were "
                   "given the same --node_rank");
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

DefaultGroup& current(const char* op) {
  ENGINE_REQUIRE(g_default != nullptr, "[", op,
                 "] the default process group is not initialized: call "
                 "dist::init_process_group() first (or it was already destroyed)");
  return *g_default;
}

Work finish(Work w, bool async_op) {
  if (!async_op) w.wait();
  return w;
}

}  // namespace

namespace {
// The launch environment as found, unchecked.
LaunchInfo parse_launch_env() {
  LaunchInfo info;
  if (env("RANK") || env("WORLD_SIZE")) {
    info.source = "torchrun-style";
    info.rank = env_int("RANK", -1);
    info.rank_given = env("RANK") != nullptr;
    info.world_size = env_int("WORLD_SIZE", -1);
    info.local_rank = env_int("LOCAL_RANK", 0);
    info.local_world_size = env_int("LOCAL_WORLD_SIZE", 1);
    info.local_world_given = env("LOCAL_WORLD_SIZE") != nullptr;
  } else if (env("SLURM_PROCID")) {
    info.source = "slurm";
    info.rank = env_int("SLURM_PROCID", -1);
    info.rank_given = true;
    info.world_size = env_int("SLURM_NTASKS", -1);
    info.local_rank = env_int("SLURM_LOCALID", 0);
    info.local_world_size = env_int("SLURM_NTASKS_PER_NODE", 1);
    info.local_world_given = env("SLURM_NTASKS_PER_NODE") != nullptr;
  } else if (env("OMPI_COMM_WORLD_RANK")) {
    info.source = "openmpi";
    info.rank = env_int("OMPI_COMM_WORLD_RANK", -1);
    info.rank_given = true;
    info.world_size = env_int("OMPI_COMM_WORLD_SIZE", -1);
    info.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0);
    info.local_world_size = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1);
    info.local_world_given = env("OMPI_COMM_WORLD_LOCAL_SIZE") != nullptr;
  }
  if (const char* a = env("MASTER_ADDR")) info.master_addr = a;
  info.master_port = env_int("MASTER_PORT", -1);
  return info;
}

void check_rank(const LaunchInfo& info) {
  // Set but out of range is a different mistake from not set at all.
  ENGINE_REQUIRE(info.world_size == -1 || info.world_size >= 1, "[init_process_group] WORLD_SIZE=", info.world_size,
                 " is invalid: it is the number of processes, at least 1");
  ENGINE_REQUIRE(info.rank >= -1 && !(info.rank == -1 && info.rank_given), "[init_process_group] RANK=", info.rank,
                 " is invalid: ranks run from 0 to WORLD_SIZE - 1");
  ENGINE_REQUIRE(info.rank >= 0 && info.world_size >= 1,
                 "[init_process_group] RANK and WORLD_SIZE are not set: start the processes with the launcher "
                 "(bazel run //dist:launch -- --nproc_per_node=2 ...), srun or mpirun, export RANK and WORLD_SIZE, "
                 "or pass rank and world_size in InitOptions");
  ENGINE_REQUIRE(info.rank < info.world_size, "[init_process_group] RANK=", info.rank,
                 " must be less than WORLD_SIZE=", info.world_size);
  ENGINE_REQUIRE(info.world_size <= kMaxWorldSize, "[init_process_group] WORLD_SIZE=", info.world_size,
                 " is more ranks than this engine supports (", kMaxWorldSize, ")");
  ENGINE_REQUIRE(info.local_rank >= 0, "[init_process_group] LOCAL_RANK=", info.local_rank,
                 " is invalid: local ranks run from 0 to LOCAL_WORLD_SIZE - 1");
  ENGINE_REQUIRE(!info.local_world_given || (info.local_world_size >= 1 && info.local_world_size <= info.world_size &&
                                             info.local_rank < info.local_world_size),
                 "[init_process_group] LOCAL_RANK=", info.local_rank, " and LOCAL_WORLD_SIZE=", info.local_world_size,
                 " do not fit: the node has LOCAL_WORLD_SIZE ranks (1 to WORLD_SIZE=", info.world_size,
                 "), numbered from 0");
}

void check_master(const LaunchInfo& info) {
  ENGINE_REQUIRE(info.master_port != 0 || info.world_size == 1,
                 "[init_process_group] MASTER_PORT=0 with WORLD_SIZE=", info.world_size,
                 ": rank 0 would listen on a port of its choosing that the other ranks cannot know; "
                 "export a fixed free port such as 29500, or use the launcher (it picks one and tells every rank)");
  ENGINE_REQUIRE(!info.master_addr.empty(),
                 "[init_process_group] MASTER_ADDR is not set: export the address of "
                 "rank 0's machine (127.0.0.1 on one machine), or use the launcher");
  ENGINE_REQUIRE(info.master_port >= 0 && info.master_port <= 65535, "[init_process_group] MASTER_PORT is ",
                 info.master_port < 0 ? "not set" : "out of range",
                 ": export a free port such as 29500, or use "
                 "the launcher (it picks one)");
}
}  // namespace

namespace {
// Room for the store's connections before rank 0 serves it: every rank and launcher
// connects to it, before the mesh (connect_mesh makes room for its own share, on every
// rank, and tells every rank when it cannot). The soft limit is raised for both where the
// hard one allows; rank 0 stops here if even the store's connections do not fit.
void reserve_store_connections(const LaunchInfo& info, bool cpu) {
  if (info.rank != 0) return;
  const int64_t w = info.world_size, launchers = w / std::max(1, info.local_world_size);
  const int64_t store = w + launchers + 16;
  if (raise_open_files(store + (cpu ? w - 1 : 0) + 16)) return;
  reserve_open_files(store, "[init_process_group] rank 0 of " + std::to_string(w) +
                                " (one connection from each rank and launcher to the rendezvous store it serves)");
}
}  // namespace

LaunchInfo read_launch_env(bool need_master) {
  LaunchInfo info = parse_launch_env();
  check_rank(info);
  if (need_master) check_master(info);
  return info;
}

void init_process_group(const std::string& backend, const InitOptions& options) {
  ENGINE_REQUIRE(g_default == nullptr,
                 "[init_process_group] the default process group is already initialized; "
                 "call destroy_process_group() first");
  const bool cpu = backend == "gloo" || backend == "tcp";
  ENGINE_REQUIRE(cpu || backend == "nccl", "[init_process_group] unknown backend \"", backend,
                 "\": use \"gloo\" (CPU tensors, over TCP) or \"nccl\" (CUDA tensors)");
  auto g = std::make_unique<DefaultGroup>();
  g->backend = cpu ? "gloo" : "nccl";  // "tcp" is another name for our CPU backend
  StoreOptions so;
  so.timeout = resolve_timeout(options.timeout);
  so.token = !options.token.empty() ? options.token : (env("ENGINE_JOB_TOKEN") ? env("ENGINE_JOB_TOKEN") : "");
  so.generation = store_generation();
  so.join_later_restart = true;

  const std::string& m = options.init_method;
  g->info = parse_launch_env();
  LaunchInfo& info = g->info;
  if (options.rank >= 0) info.rank = options.rank;  // explicit arguments win over the environment
  if (options.world_size >= 1) info.world_size = options.world_size;
  check_rank(info);
  // Tells a launcher that this rank now waits for the others (and, below, that it joined):
  // one that sees a rank end without joining can then stop the waiting at once.
  notify_launcher("init " + std::to_string(info.rank) + " " + std::to_string(info.world_size));
  if (m == "env://") check_master(info);
  reserve_store_connections(info, cpu);

  g->store = join_rendezvous(m, info, so, &g->file_to_remove);
  if (cpu) {
    TCPGroupOptions to;
    to.timeout = so.timeout;
    to.token = so.token;
    to.one_machine = info.local_world_given && info.local_world_size == info.world_size;
    g->group = std::make_unique<ProcessGroupTCP>(g->store, info.rank, info.world_size, to);
  } else {
    g->group = make_nccl_group(g->store, info.rank, info.world_size, info.local_rank, so.timeout);
  }
  agree_on_restart(*g->store, info);
  g_default = std::move(g);
  notify_launcher("joined");
}

namespace {
void warn_unmet(const Error& e) {
  std::fprintf(stderr,
               "[destroy_process_group] warning: rank %d could not meet the other ranks before closing its "
               "connections, so they may not have received all it sent: %s\n",
               g_default->info.rank, e.what());
}
}  // namespace

void destroy_process_group() {
  if (!g_default) return;
  // Let every rank finish with the store before rank 0 stops serving it; a rank that has
  // exited (with or without destroying its group) makes this fail quickly, and teardown
  // goes on regardless. A barrier that timed out, or a machine that stopped answering, is
  // said, not thrown: this rank's own work is done, but a peer may not have received all
  // of it (the last bytes of a collective leave a rank as it returns), and that peer's
  // error alone would blame this rank for closing its connections.
  try {
    g_default->group->barrier().wait();
  } catch (const TimedOut& e) {
    warn_unmet(e);
  } catch (const LinkLost& e) {
    warn_unmet(e);
  } catch (const Error&) {}
  g_default->group.reset();
  if (!g_default->file_to_remove.empty()) std::remove(g_default->file_to_remove.c_str());
  g_default->store.reset();
  g_default.reset();
  ++g_destroyed;
}

bool is_initialized() { return g_default != nullptr; }
int restart_count() { return std::max(launcher_restart(), g_joined_restart); }
int get_rank() { return current("get_rank").info.rank; }
int get_world_size() { return current("get_world_size").info.world_size; }
int get_local_rank() { return current("get_local_rank").info.local_rank; }
int get_local_world_size() { return current("get_local_world_size").info.local_world_size; }
std::string get_backend() { return current("get_backend").backend; }
ProcessGroup& default_group() { return *current("default_group").group; }

Work all_reduce(Tensor t, ReduceOp op, bool async_op) {
  return finish(current("all_reduce").group->all_reduce(t, op), async_op);
}
Work broadcast(Tensor t, int src, bool async_op) {
  return finish(current("broadcast").group->broadcast(t, src), async_op);
}
Work all_gather(std::vector<Tensor>& outputs, Tensor input, bool async_op) {
  return finish(current("all_gather").group->all_gather(&outputs, input), async_op);
}
Work reduce_scatter(Tensor output, Tensor input, ReduceOp op, bool async_op) {
  return finish(current("reduce_scatter").group->reduce_scatter(output, input, op), async_op);
}
Work barrier(bool async_op) { return finish(current("barrier").group->barrier(), async_op); }
Work send(Tensor t, int dst, bool async_op) { return finish(current("send").group->send(t, dst), async_op); }
Work recv(Tensor t, int src, bool async_op) { return finish(current("recv").group->recv(t, src), async_op); }
Work gather(std::vector<Tensor>& outputs, Tensor input, int dst, bool async_op) {
  return finish(current("gather").group->gather(&outputs, input, dst), async_op);
}
Work scatter(Tensor output, const std::vector<Tensor>& inputs, int src, bool async_op) {
  return finish(current("scatter").group->scatter(output, inputs, src), async_op);
}
Work reduce(Tensor t, int dst, ReduceOp op, bool async_op) {
  return finish(current("reduce").group->reduce(t, dst, op), async_op);
}
Work all_to_all(Tensor output, Tensor input, std::vector<int64_t> output_splits, std::vector<int64_t> input_splits,
                bool async_op) {
  return finish(
      current("all_to_all").group->all_to_all(output, input, std::move(output_splits), std::move(input_splits)),
      async_op);
}
std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks) {
  return current("new_group").group->new_group(ranks);
}

}  // namespace engine::dist
