// Lesson 4, step 3: under Slurm or mpirun, no launcher. A cluster's scheduler starts the
// processes itself and describes the job in its own variables: Slurm's SLURM_PROCID,
// SLURM_NTASKS, SLURM_LOCALID; Open MPI's OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK.
// init_process_group understands both; the job script only adds MASTER_ADDR and
// MASTER_PORT (the first node's address and a free port).
//
//   bazel run //lessons/04_launching_with_torchrun:03_srun_and_mpirun
#include <cstdio>

#include "dist/dist.h"

using namespace engine;

int main() try {
  const dist::LaunchInfo info = dist::read_launch_env();
  dist::init_process_group("gloo");
  Tensor t = from_vector(std::vector<float>{1});
  dist::all_reduce(t);
  std::printf("started by %s: rank %d of %d, local rank %d; all_reduce of ones = %.0f\n", info.source.c_str(),
              dist::get_rank(), dist::get_world_size(), dist::get_local_rank(), t.item());
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "03_srun_and_mpirun: %s\n", e.what());
  return 1;
}
