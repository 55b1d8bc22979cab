// One answer to lesson 5's quick check: the ring all-reduce, simulated step by step. The
// library's schedule is the same (dist/ring_schedule.h).
#include "lessons/05_inside_ddp/quick_check/exercise.h"

namespace lesson5 {
namespace {

int wrap(int a, int n) { return ((a % n) + n) % n; }

// One lockstep step: rank r sends chunk send(r) to r+1; receivers add (or copy) it into
// their own chunk of the same index. Sends are copied out first: all ranks send at once.
template <class Which>
void ring_step(std::vector<std::vector<float>>& data, int step, bool add, Which send,
               const std::function<void(const Message&)>& on_send) {
  const int n = int(data.size());
  const size_t len = data[0].size() / size_t(n);
  std::vector<std::vector<float>> sent(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    const int c = send(r);
    sent[size_t(r)].assign(data[size_t(r)].begin() + long(c * len), data[size_t(r)].begin() + long((c + 1) * len));
    on_send({step, r, wrap(r + 1, n), c});
  }
  for (int r = 0; r < n; ++r) {
    const int from = wrap(r - 1, n), c = send(from);
    for (size_t i = 0; i < len; ++i) {
      float& mine = data[size_t(r)][size_t(c) * len + i];
      mine = add ? mine + sent[size_t(from)][i] : sent[size_t(from)][i];
    }
  }
}

}  // namespace

void ring_all_reduce(std::vector<std::vector<float>>& data, const std::function<void(const Message&)>& on_send) {
  const int n = int(data.size());
  // Reduce-scatter: chunk r - s leaves rank r at step s, collecting one more rank's share at
  // every hop; after n-1 steps rank r holds chunk r+1 complete.
  for (int s = 0; s < n - 1; ++s)
    ring_step(
        data, s, true, [&](int r) { return wrap(r - s, n); }, on_send);
  // All-gather: rank r passes on chunk r+1 (finished), then whatever it last received.
  for (int s = 0; s < n - 1; ++s)
    ring_step(
        data, n - 1 + s, false, [&](int r) { return wrap(r + 1 - s, n); }, on_send);
}

}  // namespace lesson5
