// Exact comparison for tests of edge values (NaN, Inf, signed zeros against PyTorch):
// element by element, a NaN expected matches any NaN, everything else must be equal.
//
//   testing::require_same(relu(x), {testing::kNaN, 0, 2});
#pragma once

#include <cmath>
#include <limits>
#include <vector>

#include "catch2/catch.hpp"
#include "tensor/tensor.h"

namespace engine::testing {

inline const float kNaN = std::numeric_limits<float>::quiet_NaN();
inline const float kInf = std::numeric_limits<float>::infinity();

inline void require_same(const Tensor& t, const std::vector<float>& expect) {
  const std::vector<float> got = t.to_vector<float>();
  REQUIRE(got.size() == expect.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << " expected " << expect[i]);
    if (std::isnan(expect[i]))
      REQUIRE(std::isnan(got[i]));
    else
      REQUIRE(got[i] == expect[i]);
  }
}

}  // namespace engine::testing
