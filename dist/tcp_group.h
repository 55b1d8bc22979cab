// ProcessGroupTCP: our CPU backend (init_process_group("gloo") makes one). Every pair of
// ranks shares one TCP connection (a full mesh, set up through the store); collectives run
// one at a time, in call order, on a background thread, or on the thread that waits for
// them when it gets there first. all_reduce takes one of three
// algorithms, chosen from the topology found at setup (which ranks share a machine) and
// named by all_reduce_algorithm():
//   "shm"          every rank on this machine: a reduction through shared memory (shm_allreduce.h)
//   "ring"         one rank per machine: the ring over TCP (allreduce_ring.cc)
//   "hierarchical" several machines with several ranks each: shared memory within each
//                  machine, the ring between one leader per machine, the result shared back
//                  within each machine (allreduce_hierarchical.cc)
// ENGINE_ALLREDUCE=ring|shm|hierarchical forces one (shm needs every rank on one machine).
// With "shm" every other collective goes through shared memory too (shm_collectives.cc).
// With "hierarchical" so do broadcast, all_gather, reduce_scatter (hierarchical_collectives.cc)
// and reduce (the all-reduce, kept by the root only); gather, scatter and all_to_all, whose
// bytes must cross the links whichever way they go, go over TCP, straight between the ranks.
//
//   auto store = std::make_shared<TCPStore>("127.0.0.1", port, rank == 0, StoreOptions{});
//   ProcessGroupTCP group(store, rank, world, {});
//   group.all_reduce(t, ReduceOp::Sum).wait();
//
// Failures explain themselves: every message carries a header naming the collective, its
// sequence number, op, dtype and count, so a rank that calls something different is
// reported with both calls; a rank that dies (its connection closes) or stops answering
// (past the timeout) is named; and the rank that sees the failure first tells all others
// (an ABORT message), so every survivor raises the same error instead of waiting.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dist/process_group.h"
#include "dist/shm_allreduce.h"
#include "dist/socket.h"
#include "dist/store.h"
#include "dist/tcp_wire.h"

namespace engine::dist {

struct TCPGroupOptions {
  // How long one collective may wait on a peer before failing. 5 minutes: longer than a
  // course-sized rank-0-only evaluation or checkpoint (so a barrier after one does not
  // fire), short enough that a learner whose rank crashed or skipped a collective sees an
  // error while still watching. ENGINE_DIST_TIMEOUT (seconds) overrides it in dist.h.
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  // How long the machine of a peer may leave this rank's data, or probes of an idle
  // connection, unanswered before the peer is taken for lost: its machine is down (power,
  // a kernel panic) or the network to it is. Its TCP answers for a process that is busy or
  // stuck, so this never fires on a slow rank, and finds a lost machine long before
  // `timeout` would. 0: off (only `timeout` applies). ENGINE_LINK_TIMEOUT (seconds, 0 to
  // 32767), when set, overrides it.
  std::chrono::seconds link_timeout{30};
  std::string token;              // the job's secret, checked on every connection
  size_t chunk_bytes = 64 << 10;  // reduce received data in pieces this big, overlapping the transfer
  // The ring receives into a buffer at most this big, reused as its data is reduced: memory
  // that does not grow with the tensor (at least 64 bytes).
  size_t ring_window_bytes = 4 << 20;
  // Whether the collectives may use shared memory between ranks on one machine (false, or
  // ENGINE_SHM=0: TCP only).
  bool shared_memory = true;
  // "auto" (from the topology), "ring", "shm" or "hierarchical"; ENGINE_ALLREDUCE, when
  // set, overrides "auto".
  std::string all_reduce = "auto";
  // Which machine this rank is on, as the topology sees it (empty: machine_id(), the host
  // name, boot id, pid namespace and /dev/shm). Tests give ranks of one process different
  // ids to act as machines.
  std::string host_id;
  // Whether the launcher says that every rank runs on this machine (LOCAL_WORLD_SIZE equals
  // WORLD_SIZE): a rank then never looks for the interface that reaches other machines.
  bool one_machine = false;
  // Where this group's keys live in the store: "" for the default group, "g<id>/" under its
  // parent's prefix for a group made by new_group.
  std::string key_prefix;
  // A subgroup's members by their rank in the default group (errors name both numbers).
  std::vector<int> global_ranks;
};

enum class AllReduceAlgorithm { Ring, SharedMemory, Hierarchical };
const char* algorithm_name(AllReduceAlgorithm a);

class ProcessGroupTCP : public ProcessGroup {
 public:
  ProcessGroupTCP(std::shared_ptr<TCPStore> store, int rank, int size, TCPGroupOptions options);
  ~ProcessGroupTCP() override;
  std::string backend() const override { return "gloo"; }  // PyTorch's name for its CPU backend

  Work all_reduce(Tensor tensor, ReduceOp op = ReduceOp::Sum) override;
  Work broadcast(Tensor tensor, int root) override;
  Work all_gather(std::vector<Tensor>* outputs, Tensor input) override;
  Work all_gather_into_tensor(Tensor output, Tensor input) override;
  Work reduce_scatter(Tensor output, Tensor input, ReduceOp op = ReduceOp::Sum) override;
  Work barrier() override;
  Work send(Tensor tensor, int dst) override;
  Work recv(Tensor tensor, int src) override;
  Work gather(std::vector<Tensor>* outputs, Tensor input, int dst) override;  // tcp_rooted.cc
  Work scatter(Tensor output, const std::vector<Tensor>& inputs, int src) override;
  Work reduce(Tensor tensor, int dst, ReduceOp op = ReduceOp::Sum) override;
  Work all_to_all(Tensor output, Tensor input, std::vector<int64_t> output_splits = {},
                  std::vector<int64_t> input_splits = {}) override;
  // Blocks until this rank's part of the new group is connected (members only).
  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks) override;
  Tensor shared_buffer(int64_t numel) override;

  // Bytes this rank has sent over its connections (for the lessons' cost model).
  uint64_t bytes_sent() const { return bytes_sent_; }
  // Which all_reduce runs: "ring", "shm" or "hierarchical" (see above).
  std::string all_reduce_algorithm() const override { return algorithm_name(algorithm_); }
  // Whether the collectives run entirely through shared memory (all ranks on this machine).
  bool uses_shared_memory() const { return algorithm_ == AllReduceAlgorithm::SharedMemory; }
  // The ranks on this rank's machine (itself included, ascending), and how many machines
  // the group spans.
  const std::vector<int>& local_ranks() const { return local_ranks_; }
  int machine_count() const { return int(leaders_.size()); }
  // "host:port" where this rank accepts its peers' connections (empty at world size 1).
  std::string address() const override { return address_; }
  const std::shared_ptr<TCPStore>& store() const { return store_; }
  // How many collectives ran on the thread that waited for them rather than on the worker.
  uint64_t collectives_run_by_waiters() const { return queue_->run_by_waiters.load(); }

 private:
  struct Task {
    MessageHeader desc;
    std::function<void(const MessageHeader&, Deadline)> run;
    Work work;
  };
  // The queue of collectives, shared with every Work it hands out: a thread that waits on
  // one runs what is queued itself, in order (run_next), rather than waking the worker and
  // sleeping until it is done; the worker runs whatever nobody waits for. One task runs at
  // a time, on either thread.
  struct Queue {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Task> tasks;
    bool stop = false;
    bool running = false;              // a task is running (on the worker or on a waiter)
    ProcessGroupTCP* group = nullptr;  // null once the group is gone
    std::atomic<uint64_t> run_by_waiters{0};
  };
  // Runs the next queued task on this thread; false if none is queued or one is running.
  static bool run_next(const std::shared_ptr<Queue>& q);
  Work enqueue(MessageHeader desc, std::function<void(const MessageHeader&, Deadline)> run);
  void worker_loop();
  void run_task(Task& task);
  void connect_mesh();
  void accept_peers(const Listener& listener, Deadline d);  // connect_mesh's accepting half
  void all_to_all_shm(const MessageHeader& base, char* out, const std::vector<size_t>& out_at, const char* in,
                      const std::vector<size_t>& in_at, Deadline d);                        // all_to_all's shm path
  void gather_shm(std::vector<Tensor>* outputs, const Tensor& input, int dst, Deadline d);  // gather's shm path
  void await_answer(const Socket& s, Deadline d);                   // connect_mesh's wait for a lower rank's hello
  std::string listen_host(const std::string& network, Deadline d);  // the address this rank listens at
  std::string wait_for_key(const std::string& prefix, int r, const std::string& what, Deadline d);  // rank r's key
  void or_reason_in_store(const std::function<void()>& exchange);  // a lost peer's reason, if it left one

  // Messages: a header, then header.bytes of payload. recv_message checks the header it gets
  // against `expect` before reading any payload (a mismatched call is named with both
  // sides). send_recv does both at once, so a ring step never waits on its own send.
  // on_bytes, when given, is called as the payload arrives (with the bytes so far, every
  // chunk_bytes), so the ring can reduce while the rest is still on the wire. With a window
  // (a whole number of elements), `data` holds only that many bytes, reused as a ring
  // buffer: payload byte i lands at data[i % window], and on_bytes is also called each time
  // the window is full, where it must use every element received. A segment of gigabytes
  // needs megabytes.
  struct Outgoing {
    int to;
    MessageHeader header;
    const void* data;
  };
  struct Incoming {
    int from;
    MessageHeader expect;
    void* data;
    std::function<void(size_t)> on_bytes = nullptr;
    size_t window = 0;  // 0: data holds the whole payload
  };
  void send_message(int to, const MessageHeader& header, const void* data, Deadline deadline);
  void recv_message(int from, const MessageHeader& expect, void* data, Deadline deadline);
  void send_recv(const Outgoing& out, const Incoming& in, Deadline deadline);
  void transfer(const Outgoing* out, const Incoming* in, Deadline deadline);
  void check_header(const MessageHeader& got, const MessageHeader& expect, int from, Deadline deadline);
  void abort_peers(const std::string& why);
  void raise_pending_abort(int busy);
  std::string peer_name(int r) const {
    if (options_.global_ranks.empty()) return "rank " + std::to_string(r);
    return "rank " + std::to_string(options_.global_ranks[size_t(r)]) + " (rank " + std::to_string(r) +
           " of the group)";
  }
  // What a timeout waiting for rank r says of it: its name, its address when it is on
  // another machine, and what may keep it (a network cut, too, between machines).
  std::string waiting_for(int r) const;
  bool on_another_machine(int r) const;  // as the topology found it (false before)
  // The error for a peer whose machine stopped answering (link_timeout), in collective `what`.
  [[noreturn]] void link_lost(int r, const MessageHeader& what) const;
  std::string key(const std::string& k) const { return options_.key_prefix + k; }  // this group's store key

  // Setup: which ranks share a machine (local_ranks_, leaders_), then the algorithm, with
  // shared memory among the local ranks where it uses it. Every rank reaches the same choice.
  void discover_topology();
  [[noreturn]] void mesh_failed(const std::string& why);  // tells the ranks waiting for this one, then throws
  void fail_if_mesh_failed();                             // mesh_failed with another rank's reason, if one is given
  void choose_algorithm();
  void agree_on_setting(const std::string& mine);  // throws, naming two ranks, unless all have `mine`

  // The ring (allreduce_ring.cc) over the ranks `ring` (this rank is ring[pos]); `bounds`
  // has ring.size()+1 entries: segment k is elements [bounds[k], bounds[k+1]). `shift`
  // chooses which segment each member ends up owning.
  struct Ring {
    std::vector<int> ranks;
    int pos;
    int size() const { return int(ranks.size()); }
    int next() const { return ranks[size_t((pos + 1) % size())]; }
    int prev() const { return ranks[size_t((pos + size() - 1) % size())]; }
  };
  Ring full_ring() const;
  void ring_reduce_scatter(const Ring& ring, char* data, const std::vector<int64_t>& bounds, DType dtype, ReduceOp op,
                           const MessageHeader& desc, int shift, Deadline deadline);
  // The same, leaving `in` as it was: the segment this rank finishes goes to `out`.
  void ring_reduce_scatter_into(const Ring& ring, const char* in, char* out, const std::vector<int64_t>& bounds,
                                DType dtype, ReduceOp op, const MessageHeader& desc, int shift, Deadline deadline);
  // Their steps: send_from(step, seg) is where the segment sent at that step lies,
  // sum_into(step, seg) where the segment received then, plus this rank's part of it (in), goes.
  void ring_reduce_scatter_steps(const Ring& ring, const char* in, const std::vector<int64_t>& bounds, DType dtype,
                                 ReduceOp op, const MessageHeader& desc, int shift, Deadline deadline,
                                 const std::function<const char*(int, int)>& send_from,
                                 const std::function<char*(int, int)>& sum_into);
  void ring_all_gather(const Ring& ring, char* data, const std::vector<int64_t>& bounds, DType dtype,
                       const MessageHeader& desc, int owned_shift, Deadline deadline);
  // The same with segment k at segments[k], wherever each lies (bounds still give the sizes).
  void ring_all_gather(const Ring& ring, const std::vector<char*>& segments, const std::vector<int64_t>& bounds,
                       DType dtype, const MessageHeader& desc, int owned_shift, Deadline deadline);
  // The whole all-reduce on `ring`; Avg divides by the ring's size.
  void ring_all_reduce(const Ring& ring, char* data, int64_t count, DType dtype, ReduceOp op, const MessageHeader& desc,
                       Deadline deadline);
  // all_reduce with the chosen algorithm (allreduce_hierarchical.cc for the third).
  void run_all_reduce(const Tensor& t, ReduceOp op, const MessageHeader& desc, Deadline deadline);
  void hierarchical_all_reduce(char* data, int64_t count, DType dtype, ReduceOp op, const MessageHeader& desc,
                               Deadline deadline);
  // Gives every rank of this machine the `source` rank's `count` elements at `data`, through
  // shared memory (a sum to which the others add zeros); nothing to do on a one-rank machine.
  void share_within_machine(char* data, int64_t count, DType dtype, bool source, Deadline deadline);
  // The other collectives when the job spans machines with several ranks on some
  // (hierarchical_collectives.cc): shared memory within a machine, only the machines'
  // leaders on the network. `out`/`in` hold size() blocks of m elements, block r for rank r.
  void hierarchical_all_gather(char* out, const char* mine, int64_t m, DType dtype, const MessageHeader& desc,
                               Deadline deadline);
  void hierarchical_reduce_scatter(char* mine, const char* in, int64_t m, DType dtype, ReduceOp op,
                                   const MessageHeader& desc, Deadline deadline);
  void hierarchical_broadcast(char* data, int64_t count, DType dtype, int root, const MessageHeader& desc,
                              Deadline deadline);
  // Machine order: every machine's ranks together, machines in leader order. block_at_[r]
  // is where rank r's block sits in that order; machine_start_[k] where machine k's begin.
  bool machine_order_is_rank_order() const;

  std::shared_ptr<TCPStore> store_;
  TCPGroupOptions options_;
  std::vector<Socket> peers_;          // peers_[r]: the connection to rank r (none for ourselves)
  std::unique_ptr<ShmAllReduce> shm_;  // shared memory among local_ranks_, when the algorithm uses it
  AllReduceAlgorithm algorithm_ = AllReduceAlgorithm::Ring;
  std::vector<int> local_ranks_;                   // the ranks on this machine, ascending
  std::vector<int> leaders_;                       // the lowest rank on each machine, ascending: the hierarchical ring
  std::vector<int> machine_of_;                    // machine_of_[r]: index in leaders_ of rank r's machine
  std::vector<int> block_at_, machine_start_;      // machine order (above); machine_start_ has one entry more
  std::string address_;                            // "host:port" where this rank listens
  std::vector<std::string> peer_address_;          // the IPv4 address of each peer's end (for errors)
  std::vector<pid_t> peer_pid_;                    // each peer's pid where it shares this machine, else 0
  std::string machine_;                            // the machine this rank is on (options_.host_id or machine_id())
  std::vector<uint64_t> sent_to_, received_from_;  // point-to-point counters per peer
  uint64_t next_seq_ = 0;
  int groups_made_ = 0;  // by new_group: numbers each subgroup's keys
  std::atomic<uint64_t> bytes_sent_{0};

  std::shared_ptr<Queue> queue_ = std::make_shared<Queue>();
  std::string broken_;  // set after a failure: the group cannot be used again
  std::thread worker_;
};

}  // namespace engine::dist
