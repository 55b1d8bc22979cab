// Lesson 4's quick check: a process finds its place under torchrun, Slurm and mpirun,
// and a missing or malformed variable is named.
#include <stdexcept>

#include "catch2/catch.hpp"
#include "lessons/04_launching_with_torchrun/quick_check/exercise.h"

using lesson4::where_am_i;

TEST_CASE("torchrun's variables") {
  const auto p = where_am_i({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}});
  CHECK(p.rank == 3);
  CHECK(p.world_size == 8);
  CHECK(p.local_rank == 1);
}

TEST_CASE("Slurm's and Open MPI's variables") {
  // Each value checked on its own, so a failure prints the value found beside the one expected.
  const auto s = where_am_i({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "6"}, {"SLURM_LOCALID", "2"}});
  CHECK(s.rank == 5);
  CHECK(s.world_size == 6);
  CHECK(s.local_rank == 2);
  const auto m = where_am_i({{"OMPI_COMM_WORLD_RANK", "7"}, {"OMPI_COMM_WORLD_SIZE", "16"}});
  CHECK(m.rank == 7);
  CHECK(m.world_size == 16);
  CHECK(m.local_rank == 0);  // no local rank variable: 0
}

TEST_CASE("the launcher's variables win over the scheduler's") {
  const auto p = where_am_i({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"SLURM_PROCID", "9"}, {"SLURM_NTASKS", "10"}});
  CHECK(p.rank == 1);
  CHECK(p.world_size == 2);
}

TEST_CASE("nothing set, or a value that is not a number, is an error naming the variable") {
  REQUIRE_THROWS_WITH(where_am_i({}), Catch::Contains("RANK"));
  REQUIRE_THROWS_WITH(where_am_i({{"RANK", "two"}, {"WORLD_SIZE", "4"}}), Catch::Contains("RANK"));
  REQUIRE_THROWS_WITH(where_am_i({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "4x"}}), Catch::Contains("SLURM_NTASKS"));
}
