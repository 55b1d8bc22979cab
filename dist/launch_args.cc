#include "dist/launch_args.h"

#include <arpa/inet.h>
#include <sched.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <filesystem>

#include "dist/cgroups.h"
#include "tensor/check.h"

namespace engine::dist {

namespace {

int parse_int(const std::string& flag, const std::string& v, int lo, int hi) {
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end || errno == ERANGE || x < lo || x > hi)
    throw Error(flag + " expects an integer in " + std::to_string(lo) + ".." + std::to_string(hi) + ", got \"" + v +
                "\"");
  return int(x);
}

// --nnodes N, or torchrun's elastic MIN:MAX with MIN = MAX (a fixed size); a range of
// sizes would need nodes to join and leave a running job, which this launcher does not do.
int parse_nnodes(const std::string& v) {
  const size_t colon = v.find(':');
  if (colon == std::string::npos) return parse_int("--nnodes", v, 1, 100000);
  const int lo = parse_int("--nnodes", v.substr(0, colon), 1, 100000);
  const int hi = parse_int("--nnodes", v.substr(colon + 1), 1, 100000);
  if (lo != hi)
    throw Error("--nnodes " + v + ": elastic jobs (a range of node counts) are not supported; give one number");
  return lo;
}

// torchrun's --rdzv_endpoint HOST[:PORT] (PORT defaults to 29400, as torchrun's): where
// rank 0 serves the rendezvous, the same as --master_addr and --master_port. IPv6 in [].
void parse_endpoint(const std::string& v, LaunchArgs* o) {
  std::string host = v, port = "29400";
  if (!v.empty() && v[0] == '[') {
    const size_t close = v.find(']');
    if (close == std::string::npos) throw Error("--rdzv_endpoint " + v + ": missing ']'");
    host = v.substr(1, close - 1);
    if (close + 1 < v.size()) {
      if (v[close + 1] != ':') throw Error("--rdzv_endpoint " + v + ": expected HOST:PORT");
      port = v.substr(close + 2);
    }
  } else if (const size_t colon = v.rfind(':'); colon != std::string::npos) {
    host = v.substr(0, colon), port = v.substr(colon + 1);
  }
  if (host.empty()) throw Error("--rdzv_endpoint " + v + ": no host");
  o->master_addr = host;
  o->master_port = parse_int("--rdzv_endpoint's port", port, 1, 65535);
}

// torchrun's --rdzv_backend: static (node ranks given) or c10d (node ranks handed out at
// the endpoint when not given: launch_rendezvous.h).
std::string parse_backend(const std::string& v) {
  if (v != "c10d" && v != "static") throw Error("--rdzv_backend expects c10d or static, got \"" + v + "\"");
  return v;
}

// --nproc_per_node: a number, or torchrun's gpu, cpu and auto, counted in `here`.
int parse_nproc(const std::string& flag, const std::string& v, const MachineCounts& here, std::string* from) {
  if (v != "auto" && v != "cpu" && v != "gpu") {
    if (!v.empty() && !std::isdigit(static_cast<unsigned char>(v[0])))
      throw Error(flag + " expects an integer in 1..1024, or auto, cpu or gpu, got \"" + v + "\"");
    return parse_int(flag, v, 1, 1024);
  }
  const bool gpu = v == "gpu" || (v == "auto" && here.gpus > 0);
  if (gpu && here.gpus == 0) throw Error(flag + "=gpu: no GPU is visible here (" + here.gpus_seen + ")");
  const int n = std::min(gpu ? here.gpus : here.cpus, 1024);
  const std::string ranks = std::to_string(n) + (n == 1 ? " rank" : " ranks");
  *from = flag + "=" + v + ": " + ranks +
          (gpu ? ", one per GPU (" + here.gpus_seen + ")"
               : ", one per CPU this launcher may run on" + std::string(v == "auto" ? " (no GPU is visible)" : "") +
                     (here.cpus_seen.empty() ? "" : " (" + here.cpus_seen + ")"));
  return std::max(n, 1);
}

// "--name", "--name=value", and torchrun's short forms -r, -t (and -h).
bool is_flag(const std::string& a) {
  if (a.rfind("--", 0) == 0) return true;
  const std::string key = a.substr(0, a.find('='));
  return key == "-r" || key == "-t" || key == "-h";
}

}  // namespace

const char* const kLaunchUsage =
    "usage: launch [--nproc_per_node=N] [--nnodes=N --node_rank=R] [--master_addr=A] [--master_port=P]\n"
    "              [--rdzv_endpoint=A:P] [--rdzv_backend=c10d] [--no_python]\n"
    "              [--standalone] [--job_token=T] [--max_restarts=N] [--run_id=ID] [--stopped_timeout=S]\n"
    "              [--log_dir=D [--redirects=M] [--tee=M]] PROGRAM [ARGS...]\n";

std::string launch_help() {
  return std::string(kLaunchUsage) +
         "\n"
         "Starts PROGRAM once per rank with the environment init_process_group reads (RANK,\n"
         "LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...), labels every line with its rank,\n"
         "and when a rank fails stops the others and says which one and why.\n\n"
         "  --nproc_per_node N   processes on this machine (default 1); gpu: one per GPU, cpu: one per CPU,\n"
         "                       auto: one per GPU where there is one, else one per CPU\n"
         "  --nnodes N           machines in the job (default 1); start one launcher on each\n"
         "  --node_rank R        this machine's number, 0 to N-1 (default 0)\n"
         "  --master_addr A      address of node 0, where rank 0 serves the rendezvous (default 127.0.0.1)\n"
         "  --master_port P      its port (default: a free one; with --nnodes > 1 give every node the same)\n"
         "  --rdzv_endpoint H:P  torchrun's name for both (port 29400 when omitted)\n"
         "  --rdzv_backend B     static (node ranks from --node_rank) or c10d: without --node_rank, the\n"
         "                       launchers get node ranks at the endpoint (the same command on every machine)\n"
         "  --standalone         one machine, a free port on 127.0.0.1\n"
         "  --job_token T        secret every connection presents (or ENGINE_JOB_TOKEN; needed with --nnodes > 1)\n"
         "  --max_restarts N     after a failure, start the whole group again, at most N times (default 0)\n"
         "  --run_id ID          TORCHELASTIC_RUN_ID for the ranks (default none)\n"
         "  --stopped_timeout S  seconds a rank may stay stopped (SIGSTOP) before the job is stopped (default 3; 0: "
         "never)\n"
         "  --log_dir D          per-rank logs in D/RUN_ID_XXXXXX/attempt_N/LOCAL_RANK/{stdout,stderr}.log\n"
         "                       (a new folder for every launcher, as torchrun's), with:\n"
         "  -r, --redirects M    streams only in the logs: 1 stdout, 2 stderr, 3 both\n"
         "  -t, --tee M          streams in the logs and on the console: 1, 2 or 3\n"
         "  --no_python          accepted (PROGRAM is always run as it is)\n"
         "  -h, --help           this text\n\n"
         "The ranks also read: ENGINE_SOCKET_IFNAME (the interface machines share, as GLOO_SOCKET_IFNAME),\n"
         "ENGINE_PORT_RANGE (ports ranks listen on, e.g. 29600-29700), ENGINE_DIST_TIMEOUT (seconds a\n"
         "collective may wait, default 300), ENGINE_ALLREDUCE (ring, shm or hierarchical) and ENGINE_SHM (0 or 1).\n\n"
         "Told to stop, the launcher passes the signal on: SIGTERM, SIGINT (Ctrl-C), SIGHUP and SIGQUIT as\n"
         "SIGTERM, a scheduler's warning (SIGUSR1, SIGUSR2) as it is. The ranks then have 30 s to save and\n"
         "end (a second Ctrl-C ends them at once), and the launcher exits with 128 + the signal. A signal it\n"
         "was started ignoring (nohup) stays ignored, by the ranks too.\n\n"
         "Example: launch --nproc_per_node=2 bazel-bin/lessons/02_ddp_basics/13_recap_main --epochs 3\n";
}

MachineCounts count_machine() {
  MachineCounts m;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) m.cpus = std::max(CPU_COUNT(&set), 1);
  if (const CpuQuota q = read_cpu_quota(); q.cpus > 0 && q.cpus < m.cpus) {
    m.cpus_seen = std::to_string(q.cpus) + " of the " + std::to_string(m.cpus) + " CPUs it may run on: its cgroup's " +
                  "CPU quota allows " + std::to_string(q.cpus) + (q.cpus == 1 ? " CPU's" : " CPUs'") +
                  " worth of time (" + q.where + ")";
    m.cpus = q.cpus;
  }
  int devices = 0;  // /dev/nvidia0, /dev/nvidia1, ... (not nvidiactl, nvidia-uvm)
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/dev", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() > 6 && name.rfind("nvidia", 0) == 0 && name.find_first_not_of("0123456789", 6) == std::string::npos)
      ++devices;
  }
  m.gpus = devices;
  m.gpus_seen = std::to_string(devices) + " /dev/nvidiaN device file" + (devices == 1 ? "" : "s");
  // CUDA_VISIBLE_DEVICES narrows them: its entries up to the first that names no device
  // ("" or -1: none), as CUDA counts them.
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
    int listed = 0;
    std::string v = visible;
    for (size_t start = 0; start <= v.size();) {
      const size_t comma = std::min(v.find(',', start), v.size());
      const std::string entry = v.substr(start, comma - start);
      if (entry.empty() || entry[0] == '-') break;
      ++listed, start = comma + 1;
    }
    m.gpus = std::min(devices, listed);
    m.gpus_seen += ", CUDA_VISIBLE_DEVICES=\"" + v + "\"";
  }
  return m;
}

LaunchArgs parse_launch_args(const std::vector<std::string>& args, const char* env_token, const MachineCounts& here) {
  LaunchArgs o;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (!is_flag(a)) break;  // the program starts here
    std::string key = a, value;
    const size_t eq = a.find('=');
    if (eq != std::string::npos) key = a.substr(0, eq), value = a.substr(eq + 1);
    auto need = [&]() -> std::string {
      if (eq != std::string::npos) return value;
      if (i + 1 >= args.size()) throw Error("missing value after " + key);
      return args[++i];
    };
    if (key == "--help" || key == "-h") {
      o.help = true;
      return o;
    }
    if (key == "--nproc_per_node" || key == "--nproc-per-node")
      o.nproc_per_node = parse_nproc(key, need(), here, &o.nproc_from);
    else if (key == "--nnodes")
      o.nnodes = parse_nnodes(need());
    else if (key == "--node_rank" || key == "--node-rank")
      o.node_rank = parse_int(key, need(), 0, 100000), o.node_rank_given = true;
    else if (key == "--rdzv_endpoint" || key == "--rdzv-endpoint")
      parse_endpoint(need(), &o);
    else if (key == "--rdzv_backend" || key == "--rdzv-backend")
      o.rdzv_backend = parse_backend(need());
    else if (key == "--no_python" || key == "--no-python")
      continue;  // PROGRAM is always run as it is (torchrun's default is `python PROGRAM`)
    else if (key == "--master_addr" || key == "--master-addr")
      o.master_addr = need();
    else if (key == "--master_port" || key == "--master-port")
      o.master_port = parse_int(key, need(), 0, 65535);
    else if (key == "--job_token" || key == "--job-token")
      o.token = need();
    else if (key == "--max_restarts" || key == "--max-restarts")
      o.max_restarts = parse_int(key, need(), 0, 1000);
    else if (key == "--stopped_timeout" || key == "--stopped-timeout")
      o.stopped_timeout = parse_int(key, need(), 0, 86400);
    else if (key == "--run_id" || key == "--run-id" || key == "--rdzv_id" || key == "--rdzv-id")
      o.run_id = need();
    else if (key == "--log_dir" || key == "--log-dir")
      o.log_dir = need();
    else if (key == "--redirects" || key == "-r")
      o.redirects = parse_int(key, need(), 0, 3);
    else if (key == "--tee" || key == "-t")
      o.tee = parse_int(key, need(), 0, 3);
    else if (key == "--standalone")
      o.nnodes = 1, o.node_rank = 0, o.master_addr = "127.0.0.1", o.master_port = 0;
    else if (key == "--") {
      ++i;
      break;
    } else {
      throw Error("unknown flag " + key);
    }
  }
  for (; i < args.size(); ++i) o.command.push_back(args[i]);
  if (o.command.empty()) throw Error("no program given");
  if (o.node_rank >= o.nnodes)
    throw Error("--node_rank " + std::to_string(o.node_rank) + " must be less than --nnodes " +
                std::to_string(o.nnodes));
  if (int64_t(o.nproc_per_node) * o.nnodes > 1 << 20)
    throw Error("--nproc_per_node x --nnodes = " + std::to_string(int64_t(o.nproc_per_node) * o.nnodes) +
                " processes is more than a job can have (1048576)");
  if (o.nnodes > 1 && o.master_port == 0) throw Error("with --nnodes > 1 give every node the same --master_port");
  if (o.nnodes > 1 && !o.node_rank_given && o.rdzv_backend != "c10d")
    throw Error(
        "with --nnodes > 1 give each node its --node_rank (0 on the node at --master_addr, then 1, 2, ...), or "
        "--rdzv_backend=c10d with --rdzv_endpoint to have them handed out at the rendezvous");
  if ((o.redirects || o.tee) && o.log_dir.empty())
    throw Error("--redirects and --tee write per-rank log files: give --log_dir too");
  if (o.redirects & o.tee) throw Error("a stream cannot be both redirected (--redirects) and teed (--tee)");
  if (o.run_id.empty() || o.run_id.find_first_of("/ \t\n") != std::string::npos)
    throw Error("--run_id must be a non-empty word, got \"" + o.run_id + "\"");
  in6_addr v6{};
  if (::inet_pton(AF_INET6, o.master_addr.c_str(), &v6) == 1)
    throw Error("the rendezvous address " + o.master_addr +
                " is an IPv6 address; the engine's sockets speak IPv4 only: give an IPv4 address, or a host name "
                "that has one");
  if (o.token.empty() && env_token) o.token = env_token;
  if (o.token.empty() && o.nnodes > 1)
    throw Error("with --nnodes > 1 give every node the same --job_token (or ENGINE_JOB_TOKEN)");
  return o;
}

}  // namespace engine::dist
