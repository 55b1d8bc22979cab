// The CPU backend's subgroups (new_group, tcp_group.h).
#include <algorithm>

#include "dist/tcp_group.h"
#include "tensor/check.h"

namespace engine::dist {

// Subgroups: every rank of this group posts the list it was given; the members check that
// every rank gave the same, then build a group of their own through the same store, its
// keys under this group's prefix + "g<id>/" (id: how many groups this one has made, the
// same on every rank since every rank calls new_group in the same order).

std::shared_ptr<ProcessGroup> ProcessGroupTCP::new_group(const std::vector<int>& ranks_in) {
  const std::vector<int> members = checked_group_ranks(ranks_in, size_);
  const std::string id = std::to_string(groups_made_++);
  std::string list;
  for (int r : members) list += (list.empty() ? "" : ",") + std::to_string(r);
  store_->set(key("new_group/") + id + "/" + std::to_string(rank_), list);
  const auto me = std::find(members.begin(), members.end(), rank_);
  if (me == members.end()) return nullptr;
  for (int r = 0; r < size_; ++r) {
    const std::string theirs = r == rank_ ? list : store_->get(key("new_group/") + id + "/" + std::to_string(r));
    ENGINE_REQUIRE(theirs == list, "[new_group] rank ", rank_, " was given ranks {", list, "} but rank ", r,
                   " was given {", theirs, "}: every rank must call new_group with the same list, in the same order");
  }
  TCPGroupOptions sub = options_;
  sub.key_prefix = options_.key_prefix + "g" + id + "/";
  sub.global_ranks.clear();
  for (int r : members)
    sub.global_ranks.push_back(options_.global_ranks.empty() ? r : options_.global_ranks[size_t(r)]);
  return std::make_shared<ProcessGroupTCP>(store_, int(me - members.begin()), int(members.size()), sub);
}

}  // namespace engine::dist
