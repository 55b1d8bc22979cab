// The launcher's per-rank log files (--log_dir D with --redirects or --tee), laid out as
// torchrun lays them out: D/RUN_ID_XXXXXX/attempt_N/LOCAL_RANK/stdout.log and stderr.log,
// where XXXXXX is random. Each launcher makes a folder of its own, so a second run given
// the same D keeps the first run's logs, and machines that share D (an NFS home) do not
// write into each other's files.
//
//   const std::string run = make_run_log_dir("/logs", "none");  // e.g. "/logs/none_k2j4x9"
//   FILE* out = open_rank_log(run, 0, 1, "stdout.log");       // run/attempt_0/1/stdout.log
#pragma once

#include <cstdio>
#include <string>

namespace engine::dist::launcher {

// Makes D (and its parents) and, inside it, a new folder RUN_ID_XXXXXX of this launcher's;
// throws naming the folder that cannot be made, and why.
std::string make_run_log_dir(const std::string& log_dir, const std::string& run_id);

// Creates run/attempt_N/LOCAL_RANK/name for writing (close-on-exec: no rank inherits it);
// throws naming the file that cannot be written, and why.
FILE* open_rank_log(const std::string& run, int attempt, int local_rank, const char* name);

}  // namespace engine::dist::launcher
