#include "dist/shm_allreduce.h"

#include <fcntl.h>
#include <immintrin.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "dist/process_state.h"
#include "dist/reduce_ranks.h"
#include "dist/shm_segment.h"
#include "tensor/check.h"
#include "tensor/storage.h"
#include "tensor/tensor.h"

namespace engine::dist {

// The segment: one Header, then `size` Controls, then size x 2 half-buffers.
struct ShmAllReduce::Header {
  std::atomic<uint32_t> arrived;     // ranks at the current barrier
  std::atomic<uint32_t> generation;  // bumped by the last rank to arrive; waiters futex-wait on it
  std::atomic<uint32_t> aborted;     // a failing rank sets 1, writes abort_text, then sets 2
  std::atomic<uint32_t> sleepers;    // ranks asleep (or about to sleep) on the futex
  char abort_text[1024];
};

struct ShmAllReduce::Control {
  pid_t pid;
  std::atomic<uint32_t> left;  // 1 once this rank's group is gone (its pid may live on)
  uint64_t posted;             // calls posted so far: a rank behind the others has a smaller number
  // Call `posted` is in call[posted % 2]: while a slow rank still compares the calls of one
  // collective, a fast one may already post its next call, into the other slot.
  CallDescriptor call[2];
  char padding[64];
};

namespace {

// Yields before a waiting rank sleeps on the futex. Measured on a 2-core VM: waking from
// a futex takes long enough to cost DDP ~0.5 ms a step, while yielding in a loop costs
// the others almost nothing (each yield hands the core to whoever can run).
constexpr int kSpins = 20000;
// When every rank has a core of its own, a waiting rank first spins on its core (PAUSE's
// length varies between CPUs, so the spin is bounded in time): the others are usually
// microseconds away, and a yield, a system call, notices them later.
constexpr auto kPauseSpin = std::chrono::microseconds(20);
constexpr size_t kChunk = 1 << 20;  // staging bytes per rank per half (chosen by bench/allreduce)
// How much longer than its deadline a rank waits for one that is inside the same call
// (barrier() says why).
constexpr auto kLeaderGrace = std::chrono::seconds(2);

// ThreadSanitizer follows synchronisation by address, and every rank maps the segment at
// an address of its own, so it cannot see that the barrier orders ranks that are threads
// of one process (as in the tests). Under it, each barrier also releases before arriving
// and acquires after leaving one object per segment name, the same for every rank.
#if defined(__SANITIZE_THREAD__)
}  // namespace
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
namespace {
void sanitizer_acquire(void* key) { __tsan_acquire(key); }
void sanitizer_release(void* key) { __tsan_release(key); }
void* sanitizer_key(const std::string& segment) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<char>> keys;
  std::lock_guard<std::mutex> lock(mu);
  auto& key = keys[segment];
  if (!key) key = std::make_unique<char>();
  return key.get();
}
#else
void sanitizer_acquire(void*) {}
void sanitizer_release(void*) {}
void* sanitizer_key(const std::string&) { return nullptr; }
#endif

long futex(std::atomic<uint32_t>* addr, int op, uint32_t val, const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, val, timeout, nullptr, 0);
}

// A process that exited (or is a zombie waiting to be reaped) no longer takes part.
bool alive(pid_t pid) {
  if (pid <= 0) return true;
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  const char state = process_state(pid);
  return state != 'Z' && state != 'X';
}

// Polls the store until `key` exists. Rank `owner` (process `pid`) is the one to set it:
// its death is named at once; at the deadline the error is `late`.
std::string wait_for_key(TCPStore& store, const std::string& key, int owner, pid_t pid, Deadline deadline,
                         const char* what, const std::string& late) {
  std::string value;
  while (!store.try_get(key, &value)) {
    if (!alive(pid))
      throw Error("[dist] rank " + std::to_string(owner) + " (pid " + std::to_string(pid) +
                  ") died while the ranks were setting up " + what);
    if (Clock::now() > deadline) throw Error(late);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return value;
}

}  // namespace

void ShmAllReduce::wait_for_ranks(TCPStore& store, const std::string& prefix, const std::vector<pid_t>& pids,
                                  Deadline deadline, const char* what) {
  for (int r = 0; r < size_; ++r)
    wait_for_key(store, prefix + std::to_string(r), ranks_[size_t(r)], pids[size_t(r)], deadline, what,
                 "[dist] timed out after " + std::to_string(timeout_.count() / 1000) + " s setting up " + what +
                     " on rank " + std::to_string(ranks_[size_t(rank_)]) + ": rank " +
                     std::to_string(ranks_[size_t(r)]) + " never attached (stuck, or not calling the same setup)");
}

std::unique_ptr<ShmAllReduce> ShmAllReduce::create(TCPStore& store, const std::string& scope,
                                                   const std::vector<int>& ranks, int rank,
                                                   std::chrono::milliseconds timeout, const std::string& job_tag) {
  const int size = int(ranks.size());
  if (size < 2) return nullptr;
  // The members' pids let the waits below notice a rank that dies.
  store.set(scope + "pid/" + std::to_string(rank), std::to_string(getpid()));
  std::vector<pid_t> pids;
  for (int r = 0; r < size; ++r)
    pids.push_back(pid_t(std::strtol(store.get(scope + "pid/" + std::to_string(r)).c_str(), nullptr, 10)));
  const Deadline d = deadline_in(timeout);
  const size_t bytes = sizeof(Header) + size_t(size) * sizeof(Control) + size_t(size) * 2 * kChunk;
  UnlinkOnExit unlink;
  int fd = -1;
  if (rank == 0) {
    unlink.name = unique_shm_name(job_tag, "ring");
    fd = shm_open(unlink.name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    const int err = fd < 0 ? errno : size_segment(fd, bytes);
    if (err != 0) {
      if (fd >= 0) close(fd);
      store.set(scope + "name", "");  // tell the others to stay on TCP
      std::fprintf(stderr,
                   "[dist] warning: rank %d cannot reserve %s of shared memory (%s; %s): all_reduce among "
                   "this machine's ranks takes the TCP ring. %s, or set ENGINE_SHM=0 to choose the ring without "
                   "this warning\n",
                   ranks[0], size_words(double(bytes)).c_str(), std::strerror(err), shm_room().c_str(),
                   shm_advice(err));
      return nullptr;
    }
    store.set(scope + "name", unlink.name);
  } else {
    unlink.name =
        wait_for_key(store, scope + "name", ranks[0], pids[0], d, "shared memory",
                     "[init_process_group] timed out setting up shared memory: rank 0 never published its name");
    if (unlink.name.empty()) return nullptr;
    fd = shm_open(unlink.name.c_str(), O_RDWR, 0600);
  }
  // Everyone reports whether it attached; all use shared memory only if all did.
  void* base = fd >= 0 ? mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  if (fd >= 0) close(fd);
  std::unique_ptr<ShmAllReduce> s(new ShmAllReduce(base, bytes, rank, size, kChunk, timeout));
  s->ranks_ = ranks;
  s->scope_ = scope;
  s->sanitizer_key_ = sanitizer_key(unlink.name);
  if (base == MAP_FAILED) s->base_ = nullptr;
  s->job_tag_ = job_tag;
  store.set(scope + "attached/" + std::to_string(rank), base != MAP_FAILED ? "1" : "0");
  s->wait_for_ranks(store, scope + "attached/", pids, d, "shared memory");
  for (int r = 0; r < size; ++r)
    if (store.get(scope + "attached/" + std::to_string(r)) != "1") return nullptr;
  s->control(rank)->pid = getpid();
  s->barrier(d);  // every control block filled in before anyone checks pids
  return s;
}

ShmAllReduce::ShmAllReduce(void* base, size_t bytes, int rank, int size, size_t chunk,
                           std::chrono::milliseconds timeout)
    : base_(base), bytes_(bytes), rank_(rank), size_(size), chunk_(chunk), timeout_(timeout) {
  // More ranks than cores: a spinning rank would hold the core the one it waits for needs.
  cpu_set_t cpus;
  spin_ = sched_getaffinity(0, sizeof cpus, &cpus) == 0 && CPU_COUNT(&cpus) >= size;
}

ShmAllReduce::~ShmAllReduce() {
  if (!base_) return;
  // A rank still waiting at a barrier for this one (a call this rank never made) says so
  // at its next check, rather than wait out the timeout: a thread's or a living process's
  // pid says nothing (a program may go on after destroy_process_group()).
  control(rank_)->left.store(1, std::memory_order_release);
  munmap(base_, bytes_);
}

ShmAllReduce::Header* ShmAllReduce::header() const { return static_cast<Header*>(base_); }
ShmAllReduce::Control* ShmAllReduce::control(int r) const {
  return reinterpret_cast<Control*>(static_cast<char*>(base_) + sizeof(Header)) + r;
}
char* ShmAllReduce::buffer(int r, int half) const {
  return static_cast<char*>(base_) + sizeof(Header) + size_t(size_) * sizeof(Control) +
         (size_t(r) * 2 + size_t(half)) * chunk_;
}

// Why a failing rank aborted the group. It claims the text (aborted 0 -> 1) before writing
// it and publishes it (-> 2) after, so a rank that sees 1 waits for the text (briefly:
// writing it takes microseconds) rather than reading it half written or empty.
std::string ShmAllReduce::abort_reason() const {
  const Header* h = header();
  const auto until = Clock::now() + std::chrono::milliseconds(200);
  while (h->aborted.load(std::memory_order_acquire) == 1 && Clock::now() < until) std::this_thread::yield();
  if (h->aborted.load(std::memory_order_acquire) != 2)
    return "[dist] another rank aborted the process group (its reason was not written in time)";
  return std::string(h->abort_text, strnlen(h->abort_text, sizeof h->abort_text));
}

void ShmAllReduce::check_peers_alive() {
  if (header()->aborted.load()) throw Error(abort_reason());
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    const bool dead = !alive(control(r)->pid), left = control(r)->left.load(std::memory_order_acquire);
    // A rank that failed aborted the group before it left or exited: if it did so after the
    // check above, its reason is the one to give, not its leaving.
    if ((dead || left) && header()->aborted.load()) throw Error(abort_reason());
    if (dead)
      throw Error("[dist] rank " + std::to_string(ranks_[size_t(r)]) + " (pid " + std::to_string(control(r)->pid) +
                  ") died: it exited or was killed while the others waited for it");
    if (left)
      throw Error("[dist] rank " + std::to_string(ranks_[size_t(r)]) +
                  " left the process group (destroy_process_group(), or an error that ended its group) while rank " +
                  std::to_string(ranks_[size_t(rank_)]) + " waited for it in " + current_call_ +
                  ": it stopped early (its own output says why) or made fewer collective calls than this rank");
  }
}

// A sense-free barrier: the last rank to arrive bumps the generation and wakes everyone;
// the others wait (spinning briefly, then sleeping on a futex) for the generation to move.
void ShmAllReduce::barrier(Deadline deadline) {
  Header* h = header();
  sanitizer_release(sanitizer_key_);
  const uint32_t gen = h->generation.load(std::memory_order_acquire);
  if (h->arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == uint32_t(size_)) {
    h->arrived.store(0, std::memory_order_relaxed);
    // Both sequentially consistent, as the sleeper's two steps below: either this load sees
    // its count, or its futex call sees the new generation and does not sleep. A wake is a
    // system call, paid only when someone sleeps.
    h->generation.fetch_add(1, std::memory_order_seq_cst);
    if (h->sleepers.load(std::memory_order_seq_cst) > 0) futex(&h->generation, FUTEX_WAKE, INT32_MAX, nullptr);
  } else {
    // First a short spin on this core (the others are usually microseconds away), then
    // yields, then sleep.
    for (const auto until = Clock::now() + (spin_ ? kPauseSpin : Clock::duration(0));
         h->generation.load(std::memory_order_acquire) == gen && Clock::now() < until;)
      for (int i = 0; i < 16; ++i) _mm_pause();
    for (int spin = 0; spin < kSpins && h->generation.load(std::memory_order_acquire) == gen; ++spin)
      std::this_thread::yield();
    while (h->generation.load(std::memory_order_acquire) == gen) {
      const timespec ten_ms{0, 10 * 1000 * 1000};
      h->sleepers.fetch_add(1, std::memory_order_seq_cst);
      futex(&h->generation, FUTEX_WAIT, gen, &ten_ms);
      h->sleepers.fetch_sub(1, std::memory_order_seq_cst);
      if (h->generation.load(std::memory_order_acquire) != gen) break;
      check_peers_alive();
      if (Clock::now() > deadline) {
        std::string behind, why;
        for (int r = 0; r < size_; ++r)
          if (control(r)->posted < posted_) {
            behind += (behind.empty() ? "rank " : ", rank ") + std::to_string(ranks_[size_t(r)]);
            if (why.empty()) {  // the first one stopped (or in a debugger...) is said to be
              why = state_words(control(r)->pid);
              behind += why;
            }
          }
        // Every rank here is inside this call: the one not back is busy in it, as a
        // hierarchical all-reduce's leader exchanging with the other machines is, under the
        // same deadline. Its own timeout names whom it waits for there (and aborts this
        // group with that reason), so give it a moment to be the one reported.
        if (behind.empty() && Clock::now() < deadline + kLeaderGrace) continue;
        throw TimedOut("[dist] timed out after " + std::to_string(timeout_.count() / 1000) + " s in " + current_call_ +
                       " on rank " + std::to_string(ranks_[size_t(rank_)]) + ", waiting for " +
                       (behind.empty() ? "the other ranks" : behind) +
                       (why.empty() ? ": it may be stuck, still computing, or in a different collective" : ""));
      }
    }
  }
  sanitizer_acquire(sanitizer_key_);
  if (h->aborted.load()) throw Error(abort_reason());  // woken by a failing rank, not by arrivals
}

void ShmAllReduce::agree(const CallDescriptor& mine, Deadline deadline,
                         std::string (*describe)(const CallDescriptor&)) {
  current_call_ = describe(mine);
  const int slot = int(++posted_ % 2);
  control(rank_)->call[slot] = mine;
  control(rank_)->posted = posted_;
  barrier(deadline);
  for (int r = 0; r < size_; ++r) {
    const CallDescriptor& c = control(r)->call[slot];
    if (c.seq != mine.seq || c.coll != mine.coll || c.op != mine.op || c.dtype != mine.dtype || c.count != mine.count ||
        c.root != mine.root)
      throw Error("[dist] mismatched collectives: rank " + std::to_string(ranks_[size_t(rank_)]) + " called " +
                  describe(mine) + " but rank " + std::to_string(ranks_[size_t(r)]) + " called " + describe(c) +
                  "; every rank must make the same collective calls in the same order with the same op, dtype and "
                  "element count");
  }
  // No second barrier: a rank's next call goes into the other slot, and the one after it
  // (back into this slot) only after the next call's barrier, which every rank reaches
  // only when it has compared this one.
}

Tensor ShmAllReduce::shared_buffer(TCPStore& store, int64_t numel) {
  const size_t per_rank = (size_t(numel) * 4 + 63) / 64 * 64;
  const std::string key = scope_ + "buffer/" + std::to_string(shared_buffers_++);
  const Deadline d = deadline_in(timeout_);
  std::vector<pid_t> pids;
  for (int r = 0; r < size_; ++r) pids.push_back(control(r)->pid);
  UnlinkOnExit unlink;
  int fd = -1;
  if (rank_ == 0) {
    unlink.name = unique_shm_name(job_tag_, "buf");
    fd = shm_open(unlink.name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    const int err = fd < 0 ? errno : size_segment(fd, per_rank * size_t(size_));
    if (err != 0) {
      // No room: every rank of this machine takes a private buffer, which all_reduce
      // stages through the ring segment like any other tensor (slower, the same sums).
      if (fd >= 0) close(fd);
      store.set(key, "");
      std::fprintf(stderr,
                   "[dist] warning: rank %d cannot reserve a shared buffer of %s (%s; %s): its all_reduce copies "
                   "through the staging buffers instead. %s\n",
                   ranks_[0], size_words(double(per_rank * size_t(size_))).c_str(), std::strerror(err),
                   shm_room().c_str(), shm_advice(err));
      return zeros({numel});
    }
    store.set(key, unlink.name);
  } else {
    unlink.name = wait_for_key(store, key, ranks_[0], pids[0], d, "a shared buffer",
                               "[dist] timed out setting up a shared buffer: rank 0 never published its name");
    if (unlink.name.empty()) return zeros({numel});  // rank 0 found no room (its warning says so)
    fd = shm_open(unlink.name.c_str(), O_RDWR, 0600);
    ENGINE_REQUIRE(fd >= 0, "[dist] cannot open the shared buffer ", unlink.name, ": ", std::strerror(errno));
  }
  void* base = mmap(nullptr, per_rank * size_t(size_), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  ENGINE_REQUIRE(base != MAP_FAILED, "[dist] cannot map a shared buffer: ", std::strerror(errno));
  const size_t total = per_rank * size_t(size_);
  auto seg = std::shared_ptr<Segment>(new Segment{static_cast<char*>(base), per_rank}, [total](Segment* s) {
    munmap(s->base, total);
    delete s;
  });
  // Every rank waits until all have mapped it: only then may the name go (UnlinkOnExit).
  store.set(key + "/attached/" + std::to_string(rank_), "1");
  wait_for_ranks(store, key + "/attached/", pids, d, "a shared buffer");
  segments_.push_back(seg);
  char* mine = seg->base + per_rank * size_t(rank_);
  auto storage = std::make_shared<Storage>(mine, size_t(numel) * 4, Device::cpu(), seg);
  return Tensor(storage, {numel}, {1}, 0, DType::Float32);
}

bool ShmAllReduce::find_slices(const char* data, size_t bytes, std::vector<char*>* peers) const {
  for (const auto& seg : segments_) {
    const char* mine = seg->base + seg->per_rank * size_t(rank_);
    if (data >= mine && data + bytes <= mine + seg->per_rank) {
      peers->clear();
      for (int r = 0; r < size_; ++r) peers->push_back(seg->base + seg->per_rank * size_t(r) + (data - mine));
      return true;
    }
  }
  return false;
}

void ShmAllReduce::all_reduce(char* data, int64_t count, DType dtype, ReduceOp op, Deadline deadline) {
  const size_t es = dtype_size(dtype);
  std::vector<char*> peers;
  if (count > 0 && find_slices(data, size_t(count) * es, &peers)) {
    // In place: the data are already where every rank can read them (agree() was the
    // barrier that says they are complete). Rank r reduces segment r from all slices and
    // writes the result into all of them; a barrier, and every slice holds every result.
    const int64_t lo = int64_t(rank_) * count / size_, hi = int64_t(rank_ + 1) * count / size_;
    std::vector<const char*> in;
    std::vector<char*> out;
    for (char* p : peers) in.push_back(p + size_t(lo) * es), out.push_back(p + size_t(lo) * es);
    reduce_ranks(dtype, in, out, hi - lo, op);
    barrier(deadline);
    return;
  }
  reduce(data, count, dtype, op, /*root=*/-1, deadline);
}

// Staged, chunk by chunk. Rank r reduces segment r of the chunk, so the others need only
// r's copy of segment r: each rank stages every segment but its own, reduces its own
// straight from `data`, and fetches the other segments' results from their owners. With a
// root (reduce; root >= 0), only the root takes results: the others' data stay as they were, and the
// root's bits are those all_reduce would give.
void ShmAllReduce::reduce(char* data, int64_t count, DType dtype, ReduceOp op, int root, Deadline deadline) {
  const size_t es = dtype_size(dtype);
  const bool takes = root < 0 || root == rank_;
  const int64_t per_chunk = int64_t(chunk_ / es);
  for (int64_t start = 0; start < count; start += per_chunk) {
    const int64_t n = std::min(per_chunk, count - start);
    char* mine = data + size_t(start) * es;
    const int h = next_half();
    auto segment = [&](int r) {
      return std::pair<int64_t, int64_t>{int64_t(r) * n / size_, int64_t(r + 1) * n / size_};
    };
    for (int r = 0; r < size_; ++r) {  // 1. stage the segments the others reduce
      if (r == rank_) continue;
      const auto [a, b] = segment(r);
      std::memcpy(buffer(rank_, h) + size_t(a) * es, mine + size_t(a) * es, size_t(b - a) * es);
    }
    barrier(deadline);
    const auto [lo, hi] = segment(rank_);  // 2. reduce mine into `data` and my staging
    std::vector<const char*> in;
    for (int r = 0; r < size_; ++r) in.push_back((r == rank_ ? mine : buffer(r, h)) + size_t(lo) * es);
    std::vector<char*> out{buffer(rank_, h) + size_t(lo) * es};
    if (takes) out.push_back(mine + size_t(lo) * es);
    reduce_ranks(dtype, in, out, hi - lo, op);
    barrier(deadline);
    for (int r = 0; r < size_ && takes; ++r) {  // 3. fetch the others' results
      if (r == rank_) continue;
      const auto [a, b] = segment(r);
      std::memcpy(mine + size_t(a) * es, buffer(r, h) + size_t(a) * es, size_t(b - a) * es);
    }
  }
}

void ShmAllReduce::abort(const std::string& why) {
  Header* h = header();
  uint32_t expected = 0;
  if (h->aborted.compare_exchange_strong(expected, 1)) {
    std::snprintf(h->abort_text, sizeof h->abort_text, "%s", why.c_str());
    h->aborted.store(2, std::memory_order_release);  // the text is whole: readers may use it
  }
  h->generation.fetch_add(1);  // wake anyone waiting at a barrier
  futex(&h->generation, FUTEX_WAKE, INT32_MAX, nullptr);
}

}  // namespace engine::dist
