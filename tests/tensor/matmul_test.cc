// matmul on tensors: hand values, batches with broadcasting, transposed operands read in
// place, zero sizes, and the errors.
#include "catch2/catch.hpp"
#include "tensor/gemm.h"
#include "tensor/ops.h"

using namespace engine;
using V = std::vector<float>;

TEST_CASE("2-D matmul by hand") {
  Tensor a = from_vector(V{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = from_vector(V{7, 8, 9, 10, 11, 12}, {3, 2});
  REQUIRE(matmul(a, b).to_vector<float>() == V{58, 64, 139, 154});
  // Transposed operands: (a^T)^T @ b == a @ b; the transposes are views.
  REQUIRE(matmul(a.transpose(0, 1).transpose(0, 1), b).to_vector<float>() == V{58, 64, 139, 154});
  REQUIRE(matmul(b.transpose(0, 1), a.transpose(0, 1)).to_vector<float>() == V{58, 139, 64, 154});
}

TEST_CASE("batched matmul broadcasts batch dims and matches per-batch products") {
  Generator g(9);
  Tensor a = randn({2, 1, 5, 7}, &g), b = randn({3, 7, 4}, &g);
  Tensor c = matmul(a, b);
  REQUIRE(c.shape() == Shape{2, 3, 5, 4});
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j) {
      Tensor expect = matmul(a.select(0, i).select(0, 0), b.select(0, j));
      Tensor got = c.select(0, i).select(0, j);
      const V e = expect.to_vector<float>(), o = got.to_vector<float>();
      for (size_t k = 0; k < e.size(); ++k) REQUIRE(o[k] == Approx(e[k]).epsilon(1e-5));
    }
  // A strided, sliced operand: every other row of a bigger matrix.
  Tensor big = randn({10, 7}, &g);
  Tensor rows = big.slice(0, 0, 10, 2);
  Tensor expect = matmul(rows.contiguous(), b.select(0, 0));
  const V e = expect.to_vector<float>(), o = matmul(rows, b.select(0, 0)).to_vector<float>();
  for (size_t k = 0; k < e.size(); ++k) REQUIRE(o[k] == Approx(e[k]).epsilon(1e-5));
}

TEST_CASE("a vector operand is a row on the left, a column on the right, and its dim is dropped (as PyTorch)") {
  Tensor m = from_vector(V{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor v3 = from_vector(V{1, 0, -1}), v2 = from_vector(V{2, 1});
  Tensor mv = matmul(m, v3);  // rows dotted with v3
  REQUIRE(mv.shape() == Shape{2});
  REQUIRE(mv.to_vector<float>() == V{-2, -2});
  Tensor vm = matmul(v2, m);  // 2 * row 0 + row 1
  REQUIRE(vm.shape() == Shape{3});
  REQUIRE(vm.to_vector<float>() == V{6, 9, 12});
  Tensor dot = matmul(v3, from_vector(V{4, 5, 6}));
  REQUIRE(dot.shape() == Shape{});
  REQUIRE(dot.item() == -2);
  // Batched: (2,2,3) @ (3,) is (2,2); (2,) @ (2,2,3) is (2,3). A kept size-1 dim stays.
  Tensor batch = matmul(m, ones({3, 3})).unsqueeze(0).expand({2, 2, 3});
  REQUIRE(matmul(batch, v3).shape() == Shape{2, 2});
  REQUIRE(matmul(v2, batch).shape() == Shape{2, 3});
  REQUIRE(matmul(v2, batch).to_vector<float>() == V(6, 2 * 6 + 15));
  REQUIRE(matmul(m.narrow(0, 0, 1), v3).shape() == Shape{1});
  REQUIRE(matmul(v3, m.transpose(0, 1).narrow(1, 0, 1)).shape() == Shape{1});
}

TEST_CASE("matmul with zero sizes") {
  REQUIRE(matmul(zeros({0, 3}), zeros({3, 4})).shape() == Shape{0, 4});
  REQUIRE(matmul(ones({2, 0}), ones({0, 4})).to_vector<float>() == V(8, 0.0f));
}

TEST_CASE("matmul errors show both shapes") {
  REQUIRE_THROWS_WITH(matmul(zeros({2, 3}), zeros({4, 5})),
                      Catch::Equals("[matmul] inner dimensions differ: (2,3) @ (4,5)"));
  REQUIRE_THROWS_WITH(matmul(zeros({3}), zeros({4, 3})),
                      Catch::Equals("[matmul] inner dimensions differ: (3,) @ (4,3)"));
  REQUIRE_THROWS_WITH(matmul(zeros({2, 3}), zeros({4})),
                      Catch::Equals("[matmul] inner dimensions differ: (2,3) @ (4,)"));
  REQUIRE_THROWS_WITH(matmul(scalar_tensor(2), zeros({3})),
                      Catch::Equals("[matmul] needs operands of at least 1 dim, got () @ (3,)"));
  REQUIRE_THROWS_WITH(matmul(zeros({3}), zeros({3, 4}), empty({4})),
                      Catch::Contains("[matmul] needs 2-D or batched operands for an out= product"));
  REQUIRE_THROWS_WITH(matmul(zeros({2, 2, 3}), zeros({3, 3, 4})),
                      Catch::Contains("[matmul] shapes (2,) and (3,) do not broadcast"));
  REQUIRE_THROWS_WITH(matmul(zeros({2, 2}, DType::Int64), zeros({2, 2})),
                      Catch::Contains("[matmul] needs two float32"));
}

TEST_CASE("matmul into a given output: the same bits, in that memory; a wrong output is refused") {
  Tensor a = randn({5, 7}), b = randn({3, 7});
  Tensor out = empty({5, 3});
  Tensor r = matmul(a, b.transpose(0, 1), out);
  REQUIRE(r.storage() == out.storage());
  REQUIRE(out.to_vector<float>() == matmul(a, b.transpose(0, 1)).to_vector<float>());
  REQUIRE_THROWS_WITH(matmul(a, b.transpose(0, 1), empty({3, 5})), Catch::Contains("of shape (5,3)"));
  REQUIRE_THROWS_WITH(matmul(a, b.transpose(0, 1), empty({3, 5}).transpose(0, 1)), Catch::Contains("contiguous"));
  // An output that is an operand (x = x @ w, in place): the product of the old values, for
  // a size the GEMM packs in several blocks. (PyTorch 1.13's out= gives other numbers here.)
  for (int64_t n : {int64_t(2), int64_t(300)}) {
    Tensor x = randn({n, n}), w = randn({n, n});
    const std::vector<float> want = matmul(x, w).to_vector<float>(),
                             want_t = matmul(w, x.transpose(0, 1)).to_vector<float>();
    Tensor y = x.clone();
    REQUIRE(matmul(x, w, x).to_vector<float>() == want);
    REQUIRE(matmul(w, y.transpose(0, 1), y).to_vector<float>() == want_t);
  }
}
