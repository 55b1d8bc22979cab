#include "tensor/generator_state.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "tensor/check.h"

namespace engine {

Tensor generator_state(const Generator& g) {
  const Generator::State s = g.get_state();
  int32_t spare_bits;
  std::memcpy(&spare_bits, &s.spare, 4);
  return from_vector(std::vector<int64_t>{int64_t(s.state), int64_t(s.inc), s.has_spare, spare_bits});
}

Generator::State parse_generator_state(const Tensor& t, const std::string& what) {
  const std::vector<int64_t> v =
      t.defined() && t.dtype() == DType::Int64 ? t.contiguous().to_vector<int64_t>() : std::vector<int64_t>{};
  ENGINE_REQUIRE(v.size() == 4 && (v[2] == 0 || v[2] == 1) && v[3] >= INT32_MIN && v[3] <= INT32_MAX, what,
                 " is malformed (expected 4 int64: state, inc, has_spare 0|1, spare bits)");
  Generator::State s{uint64_t(v[0]), uint64_t(v[1]), v[2] != 0, 0};
  const int32_t bits = int32_t(v[3]);
  std::memcpy(&s.spare, &bits, 4);
  return s;
}

}  // namespace engine
