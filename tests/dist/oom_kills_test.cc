// The out-of-memory kill counters the launcher reads (dist/oom_kills.h), on trees laid out
// as cgroup v2, cgroup v1, a container's mount and /proc/vmstat are.
#include "dist/oom_kills.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "catch2/catch.hpp"
#include "tests/testing/tmp_path.h"

using engine::dist::oom_note;
using engine::dist::OomKills;
using engine::dist::OomPaths;
using engine::dist::read_oom_kills;

namespace {
// A fresh tree for one case: /proc/self/cgroup, /sys/fs/cgroup and /proc/vmstat inside it.
struct Tree : engine::testing::FileTree {
  explicit Tree(const std::string& name)
      : FileTree("oom-" + name), paths{root + "/self_cgroup", root + "/cgroup", root + "/vmstat"} {}
  OomPaths paths;
};
}  // namespace

TEST_CASE("cgroup v2: the count in this process's cgroup's memory.events") {
  Tree t("v2");
  t.write("/self_cgroup", "0::/job/ranks\n");
  t.write("/cgroup/job/ranks/memory.events", "low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n");
  t.write("/vmstat", "nr_free_pages 5\noom_kill 40\n");
  const OomKills k = read_oom_kills(t.paths);
  CHECK(k.count == 2);  // not "oom" (3), not the machine's 40
  CHECK(k.where == t.root + "/cgroup/job/ranks/memory.events, this memory cgroup's count");
}

TEST_CASE("cgroup v1: the memory hierarchy's memory.oom_control, whatever else shares its line") {
  Tree t("v1");
  t.write("/self_cgroup", "9:name=systemd:/\n4:cpu,memory:/process/7\n0::/\n");
  t.write("/cgroup/memory/process/7/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 5\n");
  t.write("/vmstat", "oom_kill 9\n");
  CHECK(read_oom_kills(t.paths).count == 5);
}

TEST_CASE("a container whose cgroup is the mount's root (no cgroup namespace): the root's counter") {
  Tree t("container");
  t.write("/self_cgroup", "0::/kubepods/pod1/abc\n");  // the host's path, not under this mount
  t.write("/cgroup/memory.events", "oom_kill 7\n");
  CHECK(read_oom_kills(t.paths).count == 7);
}

TEST_CASE("no memory cgroup to read: the machine's count; nothing at all: -1") {
  Tree t("machine");
  t.write("/self_cgroup", "0::/\n");
  t.write("/vmstat", "pgfault 100\noom_kill 4\n");
  const OomKills k = read_oom_kills(t.paths);
  CHECK(k.count == 4);
  CHECK(k.where == t.root + "/vmstat, the machine's count");
  Tree none("none");
  CHECK(read_oom_kills(none.paths).count == -1);
}

TEST_CASE("the note: said only when the same counter rose") {
  const OomKills before{3, "memory.events"}, same{3, "memory.events"}, rose{4, "memory.events"};
  CHECK(oom_note(before, same).empty());  // kill -9 by hand
  CHECK(oom_note(OomKills{}, rose).empty());
  CHECK(oom_note(before, OomKills{5, "vmstat"}).empty());  // another counter: nothing to compare
  CHECK(oom_note(rose, before).empty());
  CHECK_THAT(oom_note(before, rose), Catch::Contains("out-of-memory killer: its count of OOM kills went from 3 to 4") &&
                                         Catch::Contains("(memory.events; dmesg"));
}
