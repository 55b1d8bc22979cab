// One answer to lesson 4's quick check.
#include <stdexcept>

#include "lessons/04_launching_with_torchrun/quick_check/exercise.h"

namespace lesson4 {

// The value of `name` as an int, or `fallback` when absent; throws naming it if malformed.
static int number(const std::map<std::string, std::string>& env, const std::string& name, int fallback) {
  const auto it = env.find(name);
  if (it == env.end()) return fallback;
  size_t used = 0;
  int v = 0;
  try {
    v = std::stoi(it->second, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != it->second.size())
    throw std::runtime_error(name + " is \"" + it->second + "\", which is not a number");
  return v;
}

Placement where_am_i(const std::map<std::string, std::string>& env) {
  struct Names {
    const char *rank, *world, *local;
  };
  for (const Names& n :
       {Names{"RANK", "WORLD_SIZE", "LOCAL_RANK"}, Names{"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
        Names{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"}}) {
    if (!env.count(n.rank)) continue;
    Placement p{number(env, n.rank, -1), number(env, n.world, -1), number(env, n.local, 0)};
    if (p.world_size < 0) throw std::runtime_error(std::string(n.rank) + " is set but " + n.world + " is not");
    return p;
  }
  throw std::runtime_error(
      "RANK is not set (nor SLURM_PROCID, nor OMPI_COMM_WORLD_RANK): start the program with the launcher");
}

}  // namespace lesson4
