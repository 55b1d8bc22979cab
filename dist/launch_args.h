// The launcher's command line (torchrun's flags), parsed apart from launching so that it
// can be tested and fuzzed: bad input throws engine::Error naming the flag, never exits.
//
//   LaunchArgs a = parse_launch_args({"--nproc_per_node=2", "./train", "--epochs", "3"},
//   std::getenv("ENGINE_JOB_TOKEN"));
//   // a.nproc_per_node == 2, a.command == {"./train", "--epochs", "3"}
//   LaunchArgs b = parse_launch_args({"--nproc_per_node=auto", "./train"}, nullptr, count_machine());
#pragma once

#include <string>
#include <vector>

namespace engine::dist {

struct LaunchArgs {
  int nproc_per_node = 1, nnodes = 1, node_rank = 0, master_port = 0;  // port 0: pick a free one
  std::string master_addr = "127.0.0.1", token;
  int max_restarts = 0;              // restarts of the whole group after a failure (torchrun's --max_restarts)
  int stopped_timeout = 3;           // seconds a rank may stay stopped (SIGSTOP) before the job is stopped; 0: never
  std::string run_id = "none";       // TORCHELASTIC_RUN_ID (torchrun's --rdzv_id / --run_id)
  std::string log_dir;               // per-rank log files under log_dir/attempt_N/LOCAL_RANK/
  int redirects = 0, tee = 0;        // which streams go to the log files: 1 stdout, 2 stderr, 3 both;
                                     // redirects: only there; tee: there and to the console
  std::vector<std::string> command;  // the program and its arguments
  bool help = false;                 // --help or -h: print the usage and start nothing
  bool node_rank_given = false;      // else, with --nnodes > 1 and --rdzv_backend=c10d: handed out
  std::string rdzv_backend;          // "c10d", "static" or "" (not given)
  std::string nproc_from;            // how "auto", "cpu" or "gpu" became nproc_per_node, in words ("": a number)
};

// What --nproc_per_node=auto|cpu|gpu counts on this machine.
struct MachineCounts {
  int gpus = 0;  // NVIDIA GPUs this process can see (CUDA_VISIBLE_DEVICES applied)
  // CPUs this process may run on (its affinity: a container's or taskset's share), or fewer
  // where a cgroup's quota allows less CPU time than that (docker run --cpus=2).
  int cpus = 1;
  std::string gpus_seen;  // where the GPU count came from, in words
  std::string cpus_seen;  // "" from the affinity; else the quota that lowered it, in words
};

// The launcher's one-paragraph usage, and its --help: what each flag does (torchrun's
// names; each also takes --flag value and dashes).
extern const char* const kLaunchUsage;
std::string launch_help();

// Reads them: /dev/nvidiaN device files, CUDA_VISIBLE_DEVICES, sched_getaffinity, and the
// CPU quotas of this process's cgroups (dist/cgroups.h).
MachineCounts count_machine();

// `args` excludes the launcher's own name. Flags come first (--flag=value or --flag value);
// the first argument that is not a flag, or whatever follows "--", starts the program.
// env_token (ENGINE_JOB_TOKEN, may be null) is the token when --job_token is absent.
// --help (or -h) among the flags returns at once with `help` set and nothing else checked.
// --nproc_per_node takes torchrun's words too: gpu (one rank per GPU in `here`), cpu (one
// per CPU) and auto (gpu where there is one, else cpu).
LaunchArgs parse_launch_args(const std::vector<std::string>& args, const char* env_token,
                             const MachineCounts& here = {});

}  // namespace engine::dist
