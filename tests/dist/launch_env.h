// Helpers for tests that start processes with a launcher's environment (init_test,
// restart_test): clear it, set torchrun's variables for one rank, report to the parent.
//
//   env_for_rank(1, 2, port);               // RANK=1 WORLD_SIZE=2 MASTER_ADDR/PORT, the rest cleared
//   report(fd, "sum=" + std::to_string(s));  // what run_processes hands back as output
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <string>

#include "tests/testing/held_port.h"

namespace engine::testing {

inline int free_port() { return held_port(); }

inline void report(int fd, const std::string& s) { (void)!write(fd, s.data(), s.size()); }

inline void clear_launch_env() {
  for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                        "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                        "OMPI_COMM_WORLD_LOCAL_RANK", "ENGINE_JOB_TOKEN", "TORCHELASTIC_RESTART_COUNT"})
    unsetenv(v);
}

// torchrun's variables for `rank` of `world` with rank 0's store on 127.0.0.1:port.
inline void env_for_rank(int rank, int world, int port) {
  clear_launch_env();
  setenv("RANK", std::to_string(rank).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
}

}  // namespace engine::testing
