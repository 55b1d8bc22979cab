#include "dist/tcp_group.h"
#include "dist/tcp_wire.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "dist/start_thread.h"
#include "tensor/check.h"
#include "tensor/ops.h"
#include "tensor/parse.h"

namespace engine::dist {

using namespace wire;

ProcessGroupTCP::ProcessGroupTCP(std::shared_ptr<TCPStore> store, int rank, int size, TCPGroupOptions options)
    : ProcessGroup(rank, size),
      store_(std::move(store)),
      options_(std::move(options)),
      peers_(size_t(size)),
      sent_to_(size_t(size), 0),
      received_from_(size_t(size), 0) {
  ENGINE_REQUIRE(size >= 1, "[init_process_group] world size must be >= 1, got ", size);
  ENGINE_REQUIRE(rank >= 0 && rank < size, "[init_process_group] rank ", rank, " is outside 0..", size - 1,
                 " (RANK must be less than WORLD_SIZE)");
  connect_mesh();
  discover_topology();
  choose_algorithm();
  queue_->group = this;
  worker_ = start_thread("the collective worker", [this] { worker_loop(); });
}

const char* algorithm_name(AllReduceAlgorithm a) {
  switch (a) {
    case AllReduceAlgorithm::Ring: return "ring";
    case AllReduceAlgorithm::SharedMemory: return "shm";
    case AllReduceAlgorithm::Hierarchical: return "hierarchical";
  }
  return "?";
}

// ---------------------------------------------------------------------------------------
// Topology: every rank posts the machine it runs on; ranks with the same machine can share
// memory. The lowest rank on each machine is its leader.

void ProcessGroupTCP::discover_topology() {
  const std::string& me = machine_;  // published by connect_mesh(), before its address
  std::vector<std::string> hosts(static_cast<size_t>(size_));
  std::vector<std::string> pids(static_cast<size_t>(size_));  // meaningful only on this machine
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) {
      hosts[size_t(r)] = me;
      continue;
    }
    const std::string v = store_->get(key("topo/host/") + std::to_string(r));  // "machine\npid"
    const size_t nl = v.rfind('\n');
    hosts[size_t(r)] = v.substr(0, nl);
    if (nl != std::string::npos) pids[size_t(r)] = v.substr(nl + 1);
  }
  peer_pid_.assign(size_t(size_), 0);
  for (int r = 0; r < size_; ++r) {
    if (hosts[size_t(r)] == me) local_ranks_.push_back(r);
    char* end = nullptr;
    const long pid = std::strtol(pids[size_t(r)].c_str(), &end, 10);
    if (hosts[size_t(r)] == me && !pids[size_t(r)].empty() && *end == '\0' && pid > 0 && pid < (1L << 22))
      peer_pid_[size_t(r)] = pid_t(pid);
    if (std::find(hosts.begin(), hosts.begin() + r, hosts[size_t(r)]) == hosts.begin() + r) leaders_.push_back(r);
  }
  // Machine order: machine k's ranks (ascending) after machine k-1's.
  machine_of_.assign(size_t(size_), 0);
  for (int r = 0; r < size_; ++r)
    for (size_t k = 0; k < leaders_.size(); ++k)
      if (hosts[size_t(r)] == hosts[size_t(leaders_[k])]) machine_of_[size_t(r)] = int(k);
  machine_start_.assign(leaders_.size() + 1, 0);
  for (int r = 0; r < size_; ++r) ++machine_start_[size_t(machine_of_[size_t(r)]) + 1];
  for (size_t k = 0; k < leaders_.size(); ++k) machine_start_[k + 1] += machine_start_[k];
  block_at_.assign(size_t(size_), 0);
  std::vector<int> next = machine_start_;
  for (int r = 0; r < size_; ++r) block_at_[size_t(r)] = next[size_t(machine_of_[size_t(r)])]++;
}

namespace {
// The algorithm asked for: the option, else ENGINE_ALLREDUCE, else "auto".
std::string requested_algorithm(const TCPGroupOptions& o) {
  std::string a = o.all_reduce;
  const char* env = std::getenv("ENGINE_ALLREDUCE");
  if (a == "auto" && env && *env) a = env;
  ENGINE_REQUIRE(a == "auto" || a == "ring" || a == "shm" || a == "hierarchical",
                 "[init_process_group] ENGINE_ALLREDUCE (or TCPGroupOptions::all_reduce) is \"", a,
                 "\": use ring, shm, hierarchical or auto");
  return a;
}
}  // namespace

// Every rank must choose the same algorithm, so every rank must be asked for the same one:
// a setting that differs between machines (one launcher's environment has ENGINE_ALLREDUCE,
// the other's not) would have them run different collectives and wait out the timeout.
// Every rank reads every setting and names the first that differs from rank 0's, so all of
// them report the same pair (fail_together keeps the store up until they have).
void ProcessGroupTCP::agree_on_setting(const std::string& mine) {
  store_->set(key("topo/setting/") + std::to_string(rank_), mine);
  const std::string first = rank_ == 0 ? mine : store_->get(key("topo/setting/0"));
  std::string differs;
  for (int r = 1; r < size_ && differs.empty(); ++r) {
    const std::string theirs = r == rank_ ? mine : store_->get(key("topo/setting/") + std::to_string(r));
    if (theirs != first)
      differs = "[init_process_group] ranks disagree on the all-reduce: rank 0 has " + first + ", " + peer_name(r) +
                " has " + theirs +
                "; give every rank the same ENGINE_ALLREDUCE and ENGINE_SHM (a launcher passes its environment to "
                "its ranks: set them alike on every machine)";
  }
  if (!differs.empty()) fail_together(*store_, key("topo/setting/"), rank_, size_, differs);
}

void ProcessGroupTCP::choose_algorithm() {
  const std::string want = requested_algorithm(options_);
  const char* shm_env = std::getenv("ENGINE_SHM");  // 0 turns shared memory off; 1 (or unset) leaves it on
  const bool shm_off =
      shm_env && *shm_env && parse_choice(shm_env, "[init_process_group] ENGINE_SHM", {"0", "1"}) == "0";
  const bool shm_allowed = options_.shared_memory && !shm_off;
  agree_on_setting("ENGINE_ALLREDUCE=" + want + (shm_allowed ? "" : " with shared memory off (ENGINE_SHM=0)"));
  const bool one_machine = leaders_.size() == 1, shared_somewhere = size_t(size_) > leaders_.size();
  ENGINE_REQUIRE(want != "shm" || one_machine, "[init_process_group] ENGINE_ALLREDUCE=shm needs every rank on one ",
                 "machine, but the ranks are on ", leaders_.size(), " machines");
  ENGINE_REQUIRE(shm_allowed || (want != "shm" && want != "hierarchical"),
                 "[init_process_group] ENGINE_ALLREDUCE=", want,
                 " needs shared memory, which ENGINE_SHM=0 (or TCPGroupOptions::shared_memory) turned off");
  if (want == "ring" || (want == "auto" && (!shm_allowed || !shared_somewhere)))
    algorithm_ = AllReduceAlgorithm::Ring;
  else if (want == "shm" || (want == "auto" && one_machine))
    algorithm_ = AllReduceAlgorithm::SharedMemory;
  else
    algorithm_ = AllReduceAlgorithm::Hierarchical;
  if (algorithm_ == AllReduceAlgorithm::Ring) return;
  // Shared memory among this machine's ranks, its keys scoped by the machine's leader.
  const int index = int(std::find(local_ranks_.begin(), local_ranks_.end(), rank_) - local_ranks_.begin());
  shm_ = ShmAllReduce::create(*store_, key("shm/") + std::to_string(local_ranks_[0]) + "/", local_ranks_, index,
                              options_.timeout, shm_job_tag(options_.token));
  // Every machine must have its shared memory (or need none), or every rank falls back to
  // the ring: the choice is the same everywhere.
  const bool ok = shm_ != nullptr || local_ranks_.size() == 1;
  store_->set(key("topo/shm_ok/") + std::to_string(rank_), ok ? "1" : "0");
  for (int r = 0; r < size_; ++r) {
    if (store_->get(key("topo/shm_ok/") + std::to_string(r)) == "1") continue;
    ENGINE_REQUIRE(want == "auto", "[init_process_group] ENGINE_ALLREDUCE=", want, " but rank ", r,
                   " could not set up shared memory (is /dev/shm full or missing?)");
    shm_.reset();
    algorithm_ = AllReduceAlgorithm::Ring;
    return;
  }
}

ProcessGroupTCP::~ProcessGroupTCP() {
  {
    std::lock_guard<std::mutex> lock(queue_->mu);
    queue_->stop = true;
  }
  queue_->cv.notify_all();
  if (worker_.joinable()) worker_.join();  // it leaves once the queue is empty and nothing runs
  {
    std::lock_guard<std::mutex> lock(queue_->mu);
    queue_->group = nullptr;  // a Work that outlives the group finds nothing to run
  }
  shm_.reset();
  for (auto& p : peers_) p.close();
}

// ---------------------------------------------------------------------------------------
// The queue: collectives run in order, on the worker or on a thread that waits for one.

Work ProcessGroupTCP::enqueue(MessageHeader desc, std::function<void(const MessageHeader&, Deadline)> run) {
  Work work = Work::pending();
  work.set_helper([q = queue_] { return run_next(q); });
  {
    std::lock_guard<std::mutex> lock(queue_->mu);
    ENGINE_REQUIRE(!queue_->stop, "[dist] ", coll_name(desc.coll), " called after destroy_process_group()");
    if (desc.coll != kPointToPoint) desc.seq = next_seq_++;
    queue_->tasks.push_back({desc, std::move(run), work});
  }
  queue_->cv.notify_one();  // the worker: waiters sleep on their Work, not here
  return work;
}

bool ProcessGroupTCP::run_next(const std::shared_ptr<Queue>& q) {
  Task task;
  ProcessGroupTCP* group = nullptr;
  {
    std::lock_guard<std::mutex> lock(q->mu);
    if (q->stop || q->running || q->tasks.empty() || !q->group) return false;
    task = std::move(q->tasks.front());
    q->tasks.pop_front();
    q->running = true;
    group = q->group;
  }
  q->run_by_waiters.fetch_add(1);
  group->run_task(task);
  {
    std::lock_guard<std::mutex> lock(q->mu);
    q->running = false;
  }
  q->cv.notify_one();  // the worker waits for `running` to clear
  return true;
}

void ProcessGroupTCP::worker_loop() {
  Queue& q = *queue_;
  while (true) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(q.mu);
      q.cv.wait(lock, [&] { return !q.running && (q.stop || !q.tasks.empty()); });
      if (q.tasks.empty()) return;  // stopping, nothing left
      task = std::move(q.tasks.front());
      q.tasks.pop_front();
      q.running = true;
    }
    run_task(task);
    {
      std::lock_guard<std::mutex> lock(q.mu);
      q.running = false;
    }
  }
}

// Runs one collective; after a failure the group is broken: the peers were told (ABORT)
// and every later call fails with the original reason.
void ProcessGroupTCP::run_task(Task& task) {
  if (!broken_.empty()) {
    task.work.fail(std::make_exception_ptr(Error("[dist] " + describe(task.desc) + " on rank " + std::to_string(rank_) +
                                                 " cannot run: the process group failed earlier: " + broken_)));
    return;
  }
  try {
    const Deadline d = deadline_in(options_.timeout);
    // With shared memory, every collective starts by checking that all ranks made the same call.
    if (shm_ && task.desc.coll != kPointToPoint) shm_->agree(to_call(task.desc), d, describe_call);
    task.run(task.desc, d);
    task.work.finish();
  } catch (const std::exception& e) {  // any failure (out of memory too) goes to the caller, never terminate()
    broken_ = e.what();
    abort_peers(broken_);
    task.work.fail(std::current_exception());
  }
}

void ProcessGroupTCP::abort_peers(const std::string& why) {
  if (shm_) shm_->abort(why);
  const std::string text = why.substr(0, kMaxAbortText);
  MessageHeader h{};
  h.magic = kMagic;
  h.kind = kAbort;
  h.bytes = text.size();
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || !peers_[r].valid()) continue;
    try {  // best effort and brief: a dead or stuck peer must not hold us up
      const Deadline d = deadline_in(std::chrono::milliseconds(200));
      peers_[r].send_all(&h, sizeof h, d, peer_name(r));
      peers_[r].send_all(text.data(), text.size(), d, peer_name(r));
    } catch (const Error&) {}
  }
}

Tensor ProcessGroupTCP::shared_buffer(int64_t numel) {
  if (!shm_) return zeros({numel});
  // Drain the queue first: the setup talks through the store, outside the worker's order.
  barrier().wait();
  return shm_->shared_buffer(*store_, numel);
}

}  // namespace engine::dist
