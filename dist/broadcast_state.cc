#include "dist/broadcast_state.h"

#include <cstring>
#include <string>
#include <vector>

#include "tensor/ops.h"

namespace engine::dist {
namespace {

constexpr int64_t kMaxDims = 16;
constexpr int64_t kMaxBytes = int64_t(1) << 40;  // 1 TiB: past any optimizer state

// The header, as int64s: the number of keys, then per key its name's length, its bytes
// (one per int64), its dtype, its number of dims and the dims.
std::vector<int64_t> encode(const nn::StateDict& state) {
  std::vector<int64_t> h{int64_t(state.size())};
  for (const auto& [key, t] : state) {
    h.push_back(int64_t(key.size()));
    for (unsigned char c : key) h.push_back(c);
    h.push_back(int64_t(t.dtype()));
    h.push_back(int64_t(t.shape().size()));
    for (int64_t d : t.shape()) h.push_back(d);
  }
  return h;
}

struct Entry {
  std::string key;
  DType dtype;
  Shape shape;
  int64_t bytes = 0;
};

// The header back, every count checked against what is left of it: it comes over the
// network, so a malformed one is an error naming the root, never a read past its end.
std::vector<Entry> decode(const std::vector<int64_t>& h, int root) {
  size_t at = 0;
  auto next = [&](int64_t lo, int64_t hi, const char* what) {
    ENGINE_REQUIRE(at < h.size() && h[at] >= lo && h[at] <= hi, "[broadcast_state_dict] the state header from rank ",
                   root, " is malformed at ", what, " (entry ", at, " of ", h.size(), ")");
    return h[at++];
  };
  const int64_t n = next(0, int64_t(h.size()), "the key count");
  std::vector<Entry> entries;
  for (int64_t i = 0; i < n; ++i) {
    Entry e;
    const int64_t len = next(0, int64_t(h.size()), "a key's length");
    for (int64_t c = 0; c < len; ++c) e.key += char(next(0, 255, "a key's byte"));
    e.dtype = DType(next(0, int64_t(DType::Float16), "a dtype"));
    const int64_t ndim = next(0, kMaxDims, "a number of dims");
    e.bytes = int64_t(dtype_size(e.dtype));
    for (int64_t d = 0; d < ndim; ++d) {
      e.shape.push_back(next(0, kMaxBytes, "a dim"));
      ENGINE_REQUIRE(!__builtin_mul_overflow(e.bytes, e.shape.back(), &e.bytes) && e.bytes <= kMaxBytes,
                     "[broadcast_state_dict] the state from rank ", root, " announces a tensor \"", e.key,
                     "\" of more than ", kMaxBytes, " bytes");
    }
    entries.push_back(std::move(e));
  }
  ENGINE_REQUIRE(at == h.size(), "[broadcast_state_dict] the state header from rank ", root, " has ", h.size() - at,
                 " entries past its end");
  return entries;
}

}  // namespace

void broadcast_state_dict(ProcessGroup& group, nn::StateDict* state, int root) {
  const bool is_root = group.rank() == root;
  std::vector<int64_t> header = is_root ? encode(*state) : std::vector<int64_t>{};
  Tensor length = from_vector(std::vector<int64_t>{int64_t(header.size())});
  group.broadcast(length, root).wait();
  const int64_t n = length.to_vector<int64_t>()[0];
  ENGINE_REQUIRE(n >= 1 && n <= (int64_t(1) << 26), "[broadcast_state_dict] rank ", root,
                 " announced a state header of ", n, " entries");
  Tensor h = is_root ? from_vector(header) : zeros({n}, DType::Int64);
  group.broadcast(h, root).wait();
  const std::vector<Entry> entries = decode(h.to_vector<int64_t>(), root);

  // Every value in one buffer of int64 words (the bytes rounded up), so the state costs
  // one broadcast however many tensors it holds.
  int64_t total = 0;
  for (const Entry& e : entries) {
    total += e.bytes;
    ENGINE_REQUIRE(total <= kMaxBytes, "[broadcast_state_dict] the state from rank ", root, " announces more than ",
                   kMaxBytes, " bytes");
  }
  Tensor packed = zeros({(total + 7) / 8}, DType::Int64);
  if (is_root) {
    char* out = packed.bytes();
    for (const auto& [key, t] : *state) {
      const Tensor c = t.to(Device::cpu()).contiguous();
      if (c.nbytes() > 0) std::memcpy(out, c.bytes(), c.nbytes());
      out += c.nbytes();
    }
  }
  if (total > 0) group.broadcast(packed, root).wait();
  if (is_root) return;
  nn::StateDict received;
  const char* in = packed.bytes();
  for (const Entry& e : entries) {
    Tensor t = empty(e.shape, e.dtype);
    if (e.bytes > 0) std::memcpy(t.bytes(), in, size_t(e.bytes));
    in += e.bytes;
    received[e.key] = t;
  }
  *state = std::move(received);
}

std::vector<double> broadcast_doubles(ProcessGroup& group, const std::vector<double>& values, int root) {
  std::vector<int64_t> bits(values.size());
  std::memcpy(bits.data(), values.data(), values.size() * sizeof(double));
  Tensor t = from_vector(bits);
  group.broadcast(t, root).wait();
  bits = t.to_vector<int64_t>();
  std::vector<double> out(bits.size());
  std::memcpy(out.data(), bits.data(), bits.size() * sizeof(double));
  return out;
}

}  // namespace engine::dist
