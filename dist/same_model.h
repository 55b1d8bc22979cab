// Checks that every rank of a group holds the same model: DDP, FSDP and ZeRO pair rank r's
// parameter values with rank s's by position, so a (3,2) weight on one rank against a
// (2,3) one on another would move without any error and train nonsense.
//
//   check_same_parameters(group, params, names, "[DistributedDataParallel]");
//   // on a mismatch, every rank throws: "... parameter "1.weight" has shape (3,2) on rank 1
//   //  but another shape on another rank (size of dim 0 from 2 to 3); every rank must ..."
//   bool same = same_on_every_rank(group, {hash_of_my_settings});   // the check underneath
#pragma once

#include <string>
#include <vector>

#include "dist/process_group.h"
#include "nn/module.h"

namespace engine::dist {

// Collective: true on every rank iff every rank passed the same values (element-wise min
// and max over the ranks agree); `low` and `high` receive them when given.
bool same_on_every_rank(ProcessGroup& group, const std::vector<int64_t>& mine, std::vector<int64_t>* low = nullptr,
                        std::vector<int64_t>* high = nullptr);

// Collective: every rank of `group` calls it. `names` names the parameters in errors
// (empty: "#k", their position).
void check_same_parameters(ProcessGroup& group, const std::vector<nn::Variable>& params,
                           const std::vector<std::string>& names, const std::string& who);

}  // namespace engine::dist
