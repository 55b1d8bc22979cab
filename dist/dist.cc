#include "dist/dist.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "dist/nccl_group.h"
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

void parse_host_port(const std::string& hp, const std::string& what, std::string* host, int* port) {
  const size_t colon = hp.rfind(':');
  ENGINE_REQUIRE(colon != std::string::npos && colon > 0, "[init_process_group] ", what, " \"", hp,
                 "\" should be HOST:PORT");
  *host = hp.substr(0, colon);
  char* end = nullptr;
  const long p = std::strtol(hp.c_str() + colon + 1, &end, 10);
  ENGINE_REQUIRE(*end == '\0' && p >= 0 && p <= 65535, "[init_process_group] ", what, " \"", hp,
                 "\" has an invalid port");
  *port = int(p);
}

// file:// rendezvous: rank 0 serves the store and writes "HOST:PORT" into the file (via a
// temporary file and a rename, so nobody reads half of it); the others read it.
std::shared_ptr<TCPStore> file_rendezvous(const std::string& path, int rank, StoreOptions so, std::string* remove) {
  if (rank == 0) {
    char host[256] = "127.0.0.1";
    if (const char* a = env("MASTER_ADDR")) std::snprintf(host, sizeof host, "%s", a);
    auto store = std::make_shared<TCPStore>(host, 0, true, so);
    const std::string tmp = path + ".tmp";
    std::ofstream(tmp) << host << ":" << store->port() << "\n";
    ENGINE_REQUIRE(std::rename(tmp.c_str(), path.c_str()) == 0,
                   "[init_process_group] cannot write the rendezvous file ", path, ": ", std::strerror(errno));
    *remove = path;
    return store;
  }
  const Deadline d = deadline_in(so.timeout);
  std::string last_error = "the file does not exist yet";
  while (Clock::now() < d) {
    std::ifstream in(path);
    std::string hp;
    if (in >> hp) {
      std::string host;
      int port = 0;
      parse_host_port(hp, "the rendezvous file " + path, &host, &port);
      StoreOptions quick = so;  // a stale file from an earlier run points at a dead port:
      quick.timeout = std::min(so.timeout, std::chrono::milliseconds(2000));  // retry briefly, re-read
      try {
        auto store = std::make_shared<TCPStore>(host, port, false, quick);
        store->set_timeout(so.timeout);
        return store;
      } catch (const Error& e) {
        last_error = e.what();
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  throw Error("[init_process_group] timed out waiting for rank 0's address in " + path + " (" + last_error + ")");
}

// ---- The rendezvous check. Before any connection between ranks, each rank claims its
// RANK in the store and compares its view of the job with every other rank's, so that a
// misconfigured job fails within seconds, naming the cause and the ranks, instead of
// waiting out the timeout: two processes with one RANK, ranks that disagree on
// WORLD_SIZE, or a rank of another job that found this port (same token, another launcher).

struct Claim {
  int world = 0, group_rank = -1;
  std::string launch_id, who;  // who: "pid P on HOST"
};

std::string encode(const Claim& c) {
  return std::to_string(c.world) + " " + std::to_string(c.group_rank) + " " +
         (c.launch_id.empty() ? "-" : c.launch_id) + " " + c.who;
}

Claim decode(const std::string& s) {
  Claim c;
  std::istringstream in(s);
  in >> c.world >> c.group_rank >> c.launch_id;
  std::getline(in >> std::ws, c.who);
  if (c.launch_id == "-") c.launch_id.clear();
  return c;
}

void check_rendezvous(TCPStore& store, const LaunchInfo& info, std::chrono::milliseconds timeout) {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  Claim mine{info.world_size, env_int("GROUP_RANK", -1), env("ENGINE_LAUNCH_ID") ? env("ENGINE_LAUNCH_ID") : "",
             "pid " + std::to_string(getpid()) + " on " + host};
  const std::string me = "rank " + std::to_string(info.rank);
  // A problem found here (or by another rank: rdzv/error) ends every rank with its reason.
  auto fail = [&](const std::string& why) { fail_together(store, "rdzv/", info.rank, info.world_size, why); };
  const std::string held = store.compare_set("rdzv/rank/" + std::to_string(info.rank), "", encode(mine));
  if (held != encode(mine))
    fail("[init_process_group] two processes claim RANK=" + std::to_string(info.rank) + ": " + decode(held).who +
         " and " + mine.who + "; every process needs its own RANK");
  const Deadline d = deadline_in(timeout);
  std::string error, missing;
  for (int r = 0; r < info.world_size; ++r) {
    std::string value;
    while (!store.try_get("rdzv/rank/" + std::to_string(r), &value)) {
      if (store.try_get("rdzv/error", &error)) fail(error);
      if (Clock::now() > d) {
        for (int k = r, named = 0; k < info.world_size && named < 16; ++k)  // the first few are enough
          if (!store.try_get("rdzv/rank/" + std::to_string(k), &value))
            missing += (named++ ? ", " : "") + std::to_string(k);
        if (info.world_size - r > 16) missing += ", ...";
        throw Error("[init_process_group] " + me + " timed out waiting for rank(s) " + missing +
                    " to connect: they have not started, failed, or were refused" +
                    (launcher_restart() > 0 ? "; in a restart, a machine that was lost whole joins it when its "
                                              "launcher is started again with the same command"
                                            : ""));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    const Claim other = decode(value);
    if (other.world != mine.world)
      fail("[init_process_group] ranks disagree on WORLD_SIZE: rank " + std::to_string(r) + " (" + other.who +
           ") has " + std::to_string(other.world) + ", " + me + " (" + mine.who + ") has " +
           std::to_string(mine.world) +
           (other.launch_id.empty() || mine.launch_id.empty()
                ? "; start every rank with the same WORLD_SIZE"
                : "; both were started by launchers, which set WORLD_SIZE to --nnodes x --nproc_per_node: give every "
                  "machine's launcher the same --nnodes and --nproc_per_node"));
    // Two launchers on one node are two jobs: same token and port, but not one job.
    if (other.group_rank == mine.group_rank && other.group_rank >= 0 && !other.launch_id.empty() &&
        !mine.launch_id.empty() && other.launch_id != mine.launch_id)
      fail("[init_process_group] another job is using MASTER_PORT " + std::to_string(store.port()) +
           " with the same token: rank " + std::to_string(r) + " (" + other.who +
           ") was started by another "
           "launcher than " +
           me + " (" + mine.who +
           "); give each job its own --master_port (or let the launcher "
           "pick one)");
  }
  if (store.try_get("rdzv/error", &error)) fail(error);
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
  if (m == "env://") check_master(info);

  if (m == "env://") {
    g->store = std::make_shared<TCPStore>(info.master_addr, info.master_port, info.rank == 0, so);
  } else if (m.rfind("tcp://", 0) == 0) {
    std::string host;
    int port = 0;
    parse_host_port(m.substr(6), "init_method", &host, &port);
    ENGINE_REQUIRE(port != 0 || info.world_size == 1, "[init_process_group] init_method ", m,
                   " has port 0 with world "
                   "size ",
                   info.world_size, ": the other ranks cannot know which port rank 0 picks; give a fixed port");
    g->store = std::make_shared<TCPStore>(host, port, info.rank == 0, so);
  } else if (m.rfind("file://", 0) == 0) {
    g->store = file_rendezvous(m.substr(7), info.rank, so, &g->file_to_remove);
  } else {
    throw Error("[init_process_group] unknown init_method \"" + m + "\": use env://, tcp://HOST:PORT or file:///PATH");
  }

  check_rendezvous(*g->store, info, so.timeout);
  if (cpu) {
    TCPGroupOptions to;
    to.timeout = so.timeout;
    to.token = so.token;
    g->group = std::make_unique<ProcessGroupTCP>(g->store, info.rank, info.world_size, to);
  } else {
    g->group = make_nccl_group(g->store, info.rank, info.world_size, info.local_rank, so.timeout);
  }
  agree_on_restart(*g->store, info);
  g_default = std::move(g);
}

void destroy_process_group() {
  if (!g_default) return;
  // Let every rank finish with the store before rank 0 stops serving it; a rank that has
  // died makes this fail quickly, and teardown goes on regardless.
  try {
    g_default->group->barrier().wait();
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
