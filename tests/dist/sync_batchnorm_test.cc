// SyncBatchNorm across N ranks equals BatchNorm on the concatenated batch, forward and
// backward, with unequal per-rank batch sizes including an empty one.
#include <mutex>

#include "autograd/ops.h"
#include "catch2/catch.hpp"
#include "dist/sync_batchnorm.h"
#include "nn/conv.h"
#include "nn/layers.h"
#include "tensor/ops.h"
#include "tests/dist/ranks.h"
#include "tests/rank_assert.h"

using namespace engine;
using namespace engine::dist;
using namespace engine::nn;
using engine::testing::run_threads;

namespace {
double max_diff(const Tensor& a, const Tensor& b) {
  RANK_REQUIRE(a.shape() == b.shape());
  return a.numel() == 0 ? 0.0 : max(abs(a - b)).item();
}

// One case: per-rank batch sizes `sizes`, feature shape `rest` (after N and C).
void check(const std::vector<int64_t>& sizes, const Shape& rest) {
  const int world = int(sizes.size());
  int64_t total = 0;
  std::vector<int64_t> starts;
  for (int64_t s : sizes) starts.push_back(total), total += s;
  const int64_t C = 3;
  Shape full_shape{total, C};
  full_shape.insert(full_shape.end(), rest.begin(), rest.end());
  Generator gen(11);
  const Tensor X = randn(full_shape, &gen) * 2.0 + 1.0, DY = randn(full_shape, &gen);
  const Tensor W = randn({C}, &gen), B = randn({C}, &gen);

  // The reference: ordinary BatchNorm on the whole batch in one process.
  std::unique_ptr<BatchNorm> bn;
  if (rest.empty())
    bn = std::make_unique<BatchNorm1d>(C);
  else if (rest.size() == 1)
    bn = std::make_unique<BatchNorm1d>(C);
  else
    bn = std::make_unique<BatchNorm2d>(C);
  bn->weight.set_data(W.clone());
  bn->bias.set_data(B.clone());
  Variable x_ref(X.clone(), true);
  Variable y_ref = (*bn)(x_ref);
  y_ref.backward(DY);

  std::vector<Tensor> dw(static_cast<size_t>(world)), db(static_cast<size_t>(world));
  run_threads(world, [&](ProcessGroupTCP& g) {
    const int r = g.rank();
    SyncBatchNorm sbn(C, 1e-5, 0.1, &g);
    sbn.weight.set_data(W.clone());
    sbn.bias.set_data(B.clone());
    Variable x(X.narrow(0, starts[r], sizes[r]).contiguous(), true);
    Variable y = sbn(x);
    RANK_REQUIRE(max_diff(y.data(), y_ref.data().narrow(0, starts[r], sizes[r])) < 1e-4);
    y.backward(DY.narrow(0, starts[r], sizes[r]).contiguous());
    RANK_REQUIRE(max_diff(x.grad(), x_ref.grad().narrow(0, starts[r], sizes[r])) < 1e-4);
    dw[size_t(r)] = sbn.weight.grad();
    db[size_t(r)] = sbn.bias.grad();
    // Running statistics follow the global batch.
    RANK_REQUIRE(max_diff(sbn.running_mean, bn->running_mean) < 1e-5);
    RANK_REQUIRE(max_diff(sbn.running_var, bn->running_var) < 1e-4);
    // Eval mode: the running statistics, no communication.
    sbn.eval();
    if (sizes[r] > 0) {
      const Tensor xs = X.narrow(0, starts[r], sizes[r]).contiguous();
      static std::mutex mu;  // the reference module is shared by the rank threads
      std::lock_guard<std::mutex> lock(mu);
      bn->eval();
      RANK_REQUIRE(max_diff(sbn(Variable(xs)).data(), (*bn)(Variable(xs)).data()) < 1e-5);
    }
  });
  // Each rank's parameter gradient is its share; together they are the whole batch's.
  Tensor dw_sum = zeros({C}), db_sum = zeros({C});
  for (int r = 0; r < world; ++r) add_(dw_sum, dw[size_t(r)]), add_(db_sum, db[size_t(r)]);
  RANK_REQUIRE(max_diff(dw_sum, bn->weight.grad()) < 1e-4);
  RANK_REQUIRE(max_diff(db_sum, bn->bias.grad()) < 1e-4);
}
}  // namespace

TEST_CASE("SyncBatchNorm2d over 3 ranks with batches 3, 5 and 0 equals BatchNorm2d on all 8") {
  check({3, 5, 0}, {2, 3});
}

TEST_CASE("SyncBatchNorm1d over 2 ranks with batches 4 and 1, (N, C) and (N, C, L)") {
  check({4, 1}, {});
  check({2, 3}, {5});
}

TEST_CASE("SyncBatchNorm on 16-bit input (a convolution under autocast) normalises in float32, as BatchNorm") {
  // Values near 100 with a spread of 3: a bfloat16 mean is good to 0.5 there, which put
  // the outputs up to 0.06 (in units of the spread) from BatchNorm's, silently.
  for (DType half : {DType::BFloat16, DType::Float16}) {
    INFO(dtype_name(half));
    Generator gen(7);
    const Tensor X = (randn({8, 3, 4, 4}, &gen) * 3.0 + 100.0).to(half).to(DType::Float32);
    BatchNorm2d bn(3);
    Variable x_ref(X.clone(), true);
    Variable y_ref = bn(autograd::to(x_ref, half));
    sum(y_ref * y_ref.data()).backward();
    run_threads(2, [&](ProcessGroupTCP& g) {
      SyncBatchNorm sbn(3, 1e-5, 0.1, &g);
      Variable x(X.narrow(0, 4 * g.rank(), 4).contiguous(), true);
      Variable y = sbn(autograd::to(x, half));
      const Tensor y_mine = y_ref.data().narrow(0, 4 * g.rank(), 4);
      RANK_REQUIRE(max_diff(y.data(), y_mine) < 1e-4);
      sum(y * y.data()).backward();
      RANK_REQUIRE(max_diff(x.grad(), x_ref.grad().narrow(0, 4 * g.rank(), 4)) < 1e-3);
      RANK_REQUIRE(max_diff(sbn.running_mean, bn.running_mean) < 1e-4);
    });
  }
}

TEST_CASE("convert_sync_batchnorm swaps every BatchNorm and keeps its state") {
  run_threads(1, [](ProcessGroupTCP& g) {
    Generator gen(0);
    auto bn = std::make_shared<BatchNorm2d>(4);
    bn->running_mean.fill_(0.5);
    auto model = std::make_shared<Sequential>(
        std::vector<ModulePtr>{std::make_shared<Conv2d>(1, 4, 3, 1, 1, true, &gen), bn, std::make_shared<ReLU>()});
    auto converted = convert_sync_batchnorm(model, &g);
    RANK_REQUIRE(converted == model);
    auto* sync = dynamic_cast<SyncBatchNorm*>((*model)[1].get());
    RANK_REQUIRE(sync != nullptr);
    RANK_REQUIRE(sync->running_mean.at({2}) == 0.5);
    RANK_REQUIRE((*model)(Variable(randn({2, 1, 5, 5}, &gen))).shape() == Shape{2, 4, 5, 5});
    RANK_REQUIRE_THROWS_WITH(SyncBatchNorm(4, 1e-5, 0.1, &g)(Variable(zeros({1, 4, 1, 1}))),
                             Catch::Contains("more than 1 value per channel across all ranks"));
  });
}
