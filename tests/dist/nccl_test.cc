// The nccl backend at world size 1 (NCCL refuses two ranks on one GPU; multi-rank
// correctness is tested on the CPU backend, which runs the same ring). Without a GPU the
// test says it was skipped and why, and checks the error a learner would get.
#include <cstdlib>
#include <iostream>

#include "catch2/catch.hpp"
#include "tests/rank_assert.h"
#include "dist/dist.h"
#include "tensor/cuda/runtime.h"
#include "tensor/ops.h"

using namespace engine;

namespace {
void single_rank_env() {
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "1", 1);
  setenv("LOCAL_RANK", "0", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", "0", 1);
}
}  // namespace

TEST_CASE("nccl at world size 1: all_reduce (both algorithms), broadcast, all_gather, barrier") {
  single_rank_env();
  if (cuda::device_count() == 0) {
    const std::string why = cuda::unavailable_reason();
    std::cout << "SKIPPED: nccl backend test (no usable GPU: " << why << ")" << std::endl;
    WARN("SKIPPED: no usable GPU: " << why);
    RANK_REQUIRE_THROWS_WITH(dist::init_process_group("nccl"), Catch::Contains("nccl") && Catch::Contains("\"gloo\""));
    REQUIRE_FALSE(dist::is_initialized());
    return;
  }
  for (const char* algo : {"nccl", "ring"}) {
    INFO("algorithm " << algo);
    setenv("ENGINE_NCCL_ALLREDUCE", algo, 1);
    dist::init_process_group("nccl");
    RANK_REQUIRE(dist::get_backend() == "nccl");
    Tensor host = arange(0, 1000);
    Tensor dev = host.to(Device::cuda(0));
    dist::all_reduce(dev, dist::ReduceOp::Sum);
    RANK_REQUIRE(dev.to(Device::cpu()).to_vector<float>() == host.to_vector<float>());  // world 1: unchanged
    dist::all_reduce(dev, dist::ReduceOp::Avg);
    RANK_REQUIRE(dev.to(Device::cpu()).to_vector<float>() == host.to_vector<float>());
    dist::broadcast(dev, 0);
    std::vector<Tensor> outs;
    dist::all_gather(outs, dev);
    RANK_REQUIRE(outs.size() == 1);
    RANK_REQUIRE(outs[0].to(Device::cpu()).to_vector<float>() == host.to_vector<float>());
    dist::barrier();
    RANK_REQUIRE_THROWS_WITH(dist::all_reduce(host), Catch::Contains("needs tensors on cuda:0"));
    dist::destroy_process_group();
  }
  unsetenv("ENGINE_NCCL_ALLREDUCE");
}
