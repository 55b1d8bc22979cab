// The ring all-reduce drawn step by step, from what a real run did: which chunk each rank
// sent and received at every step, and whose contributions each chunk held afterwards.
//
//   Tensor t = full({world}, float(1 << rank));        // rank r contributes 2^r
//   RingLog log;
//   ring_all_reduce(group, t, &log);
//   auto all = gather_ring_logs(group, log);           // every rank's log, on every rank
//   std::cout << ring_diagram_text(all);               // a table per step
//   write_file(dir + "/ring.svg", ring_diagram_svg(all));
//
// When rank r starts with 2^r in every element, a chunk's value is the sum of 2^r over the
// ranks whose contributions it holds: its bits name them (5 = 1 + 4: ranks 0 and 2).
#pragma once

#include <string>
#include <vector>

#include "lessons/common/ring.h"

namespace lessons {

std::vector<RingLog> gather_ring_logs(engine::dist::ProcessGroup& group, const RingLog& mine);

// "{0,2}" for 5.
std::string contributors(float value);

std::string ring_diagram_text(const std::vector<RingLog>& logs);
std::string ring_diagram_svg(const std::vector<RingLog>& logs);

void write_file(const std::string& path, const std::string& text);  // throws naming the path

}  // namespace lessons
