// Lesson 4's quick check: where am I in the job? Read it from the environment the way
// init_process_group does: the launcher's (torchrun's) variables first, else Slurm's, else
// Open MPI's.
//
//   Placement p = where_am_i({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}});
//   // p.rank == 3, p.world_size == 8, p.local_rank == 1
//
// | launcher   | rank          | world size          | local rank                  |
// | torchrun   | RANK          | WORLD_SIZE          | LOCAL_RANK                  |
// | Slurm      | SLURM_PROCID  | SLURM_NTASKS        | SLURM_LOCALID               |
// | Open MPI   | OMPI_COMM_WORLD_RANK | OMPI_COMM_WORLD_SIZE | OMPI_COMM_WORLD_LOCAL_RANK |
//
// The local rank defaults to 0 when its variable is absent. When no rank variable is set
// at all, or a value is not a number, throw std::runtime_error naming the variable.
#pragma once

#include <map>
#include <string>

namespace lesson4 {

struct Placement {
  int rank = -1, world_size = -1, local_rank = 0;
};

Placement where_am_i(const std::map<std::string, std::string>& env);

}  // namespace lesson4
