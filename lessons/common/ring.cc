#include "lessons/common/ring.h"

#include "tensor/check.h"
#include "tensor/ops.h"

namespace lessons {

using namespace engine;

std::pair<int64_t, int64_t> chunk_range(int64_t n, int parts, int c) {
  const int64_t q = n / parts, extra = n % parts;
  return {c * q + std::min<int64_t>(c, extra), q + (c < extra ? 1 : 0)};
}

static std::vector<float> first_values(const Tensor& t, int parts) {
  std::vector<float> v;
  for (int c = 0; c < parts; ++c) v.push_back(float(t.narrow(0, chunk_range(t.numel(), parts, c).first, 1).item()));
  return v;
}

// One step of the ring: send `out` to the next rank while receiving `in` from the previous.
// Even ranks send first and odd ranks receive first, so that in every ring some rank is
// receiving while its neighbour sends and no one waits on a rank that is waiting too.
static void exchange(dist::ProcessGroup& g, const Tensor& out, Tensor& in, int64_t* bytes) {
  const int n = g.size(), next = (g.rank() + 1) % n, prev = (g.rank() + n - 1) % n;
  if (g.rank() % 2 == 0) {
    g.send(out, next).wait();
    g.recv(in, prev).wait();
  } else {
    g.recv(in, prev).wait();
    g.send(out, next).wait();
  }
  *bytes += int64_t(out.nbytes());
}

void ring_all_reduce(dist::ProcessGroup& g, Tensor& t, RingLog* log) {
  const int n = g.size(), r = g.rank();
  ENGINE_REQUIRE(t.dtype() == DType::Float32 && t.is_contiguous() && t.dim() == 1,
                 "[ring_all_reduce] needs a contiguous 1-d float32 tensor");
  ENGINE_REQUIRE(t.numel() >= n, "[ring_all_reduce] needs at least one element per rank: ", t.numel(), " < ", n);
  RingLog local;
  local.start = first_values(t, n);
  auto chunk = [&](int c) {
    const auto [first, count] = chunk_range(t.numel(), n, ((c % n) + n) % n);
    return t.narrow(0, first, count);
  };
  for (int phase = 0; phase < 2; ++phase) {
    for (int s = 0; s + 1 < n; ++s) {
      // reduce-scatter: send (r - s), receive (r - s - 1); all-gather: send (r + 1 - s), receive (r - s).
      const int send_c = ((phase == 0 ? r - s : r + 1 - s) % n + n) % n;
      const int recv_c = ((phase == 0 ? r - s - 1 : r - s) % n + n) % n;
      Tensor out = chunk(send_c), mine = chunk(recv_c);
      Tensor in = empty(mine.shape());
      exchange(g, out.contiguous(), in, &local.bytes_sent);
      if (phase == 0)
        add_(mine, in);  // add the previous rank's partial sum to mine
      else
        mine.copy_(in);  // take the finished sum
      local.steps.push_back({phase == 0 ? "reduce-scatter" : "all-gather", s, send_c, (r + 1) % n, recv_c,
                             (r + n - 1) % n, first_values(t, n)});
    }
  }
  if (log) *log = std::move(local);
}

int64_t naive_all_reduce(dist::ProcessGroup& g, Tensor& t, int64_t* received) {
  const int n = g.size();
  int64_t bytes = 0, in_bytes = 0;
  if (g.rank() == 0) {
    Tensor in = empty(t.shape());
    for (int src = 1; src < n; ++src) {
      g.recv(in, src).wait();
      in_bytes += int64_t(in.nbytes());
      add_(t, in);
    }
    for (int dst = 1; dst < n; ++dst) {
      g.send(t, dst).wait();
      bytes += int64_t(t.nbytes());
    }
  } else {
    g.send(t, 0).wait();
    bytes += int64_t(t.nbytes());
    g.recv(t, 0).wait();
    in_bytes += int64_t(t.nbytes());
  }
  if (received) *received = in_bytes;
  return bytes;
}

}  // namespace lessons
