// The nccl backend at world size 1 (NCCL refuses two ranks on one GPU; multi-rank
// correctness is tested on the CPU backend, which runs the same ring). Without a GPU the
// test says it was skipped and why, and checks the error a learner would get.
#include <cstdlib>
#include <fstream>
#include <iostream>

#include "catch2/catch.hpp"
#include "dist/comm_hooks.h"
#include "dist/ddp.h"
#include "dist/dist.h"
#include "dist/nccl_group.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/sgd.h"
#include "tensor/cuda/runtime.h"
#include "tensor/ops.h"
#include "tests/rank_assert.h"
#include "tests/testing/gpu.h"

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
    // Given tensors are written into, as PyTorch's all_gather and gather do: here a row of
    // one larger tensor.
    Tensor rows = zeros({1, 1000}).to(Device::cuda(0));
    std::vector<Tensor> given{rows.select(0, 0)};
    dist::all_gather(given, dev);
    RANK_REQUIRE(rows.to(Device::cpu()).reshape({-1}).to_vector<float>() == host.to_vector<float>());
    Tensor into = zeros({1, 1000}).to(Device::cuda(0));
    std::vector<Tensor> gathered{into.select(0, 0)};
    dist::gather(gathered, dev, 0);
    RANK_REQUIRE(into.to(Device::cpu()).reshape({-1}).to_vector<float>() == host.to_vector<float>());
    dist::barrier();
    Tensor on_host = arange(0, 10);  // small CPU tensors travel to the GPU and back
    dist::all_reduce(on_host, dist::ReduceOp::Sum);
    RANK_REQUIRE(on_host.to_vector<float>() == arange(0, 10).to_vector<float>());
    // Outputs that share memory with their input, as views of one tensor: in place where
    // NCCL allows it (this rank's block), through a copy elsewhere; a size that does not fit
    // is named before anything runs.
    Tensor both = arange(0, 1001).to(Device::cuda(0));
    dist::reduce_scatter(both.narrow(0, 1, 1000), both.narrow(0, 0, 1000), dist::ReduceOp::Sum);
    RANK_REQUIRE(both.narrow(0, 1, 1000).to(Device::cpu()).to_vector<float>() == host.to_vector<float>());
    both = arange(0, 1001).to(Device::cuda(0));
    dist::default_group().all_gather_into_tensor(both.narrow(0, 0, 1000), both.narrow(0, 1, 1000)).wait();
    RANK_REQUIRE(both.narrow(0, 0, 1000).to(Device::cpu()).to_vector<float>() == arange(1, 1001).to_vector<float>());
    Tensor shuffled = arange(0, 1000).to(Device::cuda(0));
    dist::all_to_all(shuffled, shuffled);
    RANK_REQUIRE(shuffled.to(Device::cpu()).to_vector<float>() == host.to_vector<float>());
    RANK_REQUIRE_THROWS_WITH(dist::reduce_scatter(zeros({10}).to(Device::cuda(0)), dev, dist::ReduceOp::Sum),
                             Catch::Contains("[reduce_scatter] input of 1000 float32 must hold world size (1)"));
    RANK_REQUIRE_THROWS_WITH(dist::broadcast(dev, 1), Catch::Contains("[broadcast] root 1 is outside 0..0"));
    RANK_REQUIRE_THROWS_WITH(dist::send(dev, 0), Catch::Contains("[send] destination 0 must be another rank"));
    RANK_REQUIRE_THROWS_WITH(dist::recv(dev, 0), Catch::Contains("[recv] source 0 must be another rank"));
    std::vector<Tensor> strided_out;
    RANK_REQUIRE_THROWS_WITH(dist::all_gather(strided_out, dev.narrow(0, 0, 10).expand({3, 10})),
                             Catch::Contains("contiguous"));
    dist::destroy_process_group();
  }
  unsetenv("ENGINE_NCCL_ALLREDUCE");
}

TEST_CASE("DDP over nccl at world size 1 trains a GPU model exactly as without DDP") {
  single_rank_env();
  if (!testing::gpu_or_skip("DDP over nccl")) return;
  dist::init_process_group("nccl");
  auto make = [] {
    Generator init(9);
    return std::make_shared<nn::Sequential>(
        std::vector<nn::ModulePtr>{std::make_shared<nn::Linear>(20, 32, true, &init), std::make_shared<nn::ReLU>(),
                                   std::make_shared<nn::Linear>(32, 4, true, &init)});
  };
  // reduce_when_alone: the buckets go through NCCL on the communication stream even at
  // world size 1 (gradients copied in on the compute stream, averaged, copied back).
  for (bool through_buckets : {false, true}) {
    INFO("reduce_when_alone " << through_buckets);
    auto plain = make(), wrapped = make();
    plain->to(Device::cuda(0)), wrapped->to(Device::cuda(0));
    dist::DDPOptions options;
    options.reduce_when_alone = through_buckets;
    options.first_bucket_mb = 0.001;  // several buckets
    dist::DistributedDataParallel ddp(wrapped, options);
    nn::SGD a(plain->parameters(), {.lr = 0.1, .momentum = 0.9}), b(ddp.parameters(), {.lr = 0.1, .momentum = 0.9});
    Generator g(1);
    for (int step = 0; step < 5; ++step) {
      const Tensor x = randn({16, 20}, &g).to(Device::cuda(0)), t = randint(0, 4, {16}, &g).to(Device::cuda(0));
      a.zero_grad(), b.zero_grad();
      nn::cross_entropy((*plain)(nn::Variable(x)), t).backward();
      nn::cross_entropy(ddp(nn::Variable(x)), t).backward();
      a.step(), b.step();
    }
    auto pa = plain->parameters(), pb = wrapped->parameters();
    for (size_t i = 0; i < pa.size(); ++i)
      RANK_REQUIRE(pa[i].data().to_vector<float>() == pb[i].data().to_vector<float>());
  }
  dist::destroy_process_group();
}

TEST_CASE("DDP over nccl with the 16-bit compress hooks: buckets cross NCCL in bfloat16 or float16") {
  single_rank_env();
  if (!testing::gpu_or_skip("compress hooks over nccl")) return;
  dist::init_process_group("nccl");
  for (DType wire : {DType::BFloat16, DType::Float16}) {
    INFO(dtype_name(wire));
    Generator i1(4), i2(4);
    auto plain = std::make_shared<nn::Linear>(30, 7, true, &i1),
         wrapped = std::make_shared<nn::Linear>(30, 7, true, &i2);
    plain->to(Device::cuda(0)), wrapped->to(Device::cuda(0));
    dist::DistributedDataParallel ddp(wrapped);
    ddp.register_comm_hook(wire == DType::BFloat16 ? dist::hooks::bf16_compress_hook : dist::hooks::fp16_compress_hook);
    Generator g(2);
    const Tensor x = randn({8, 30}, &g).to(Device::cuda(0)), t = randint(0, 7, {8}, &g).to(Device::cuda(0));
    nn::cross_entropy((*plain)(nn::Variable(x)), t).backward();
    nn::cross_entropy(ddp(nn::Variable(x)), t).backward();
    // One rank: the average is the gradient itself, rounded to the wire's type and widened.
    auto pa = plain->parameters(), pb = wrapped->parameters();
    for (size_t i = 0; i < pa.size(); ++i) {
      RANK_REQUIRE(pb[i].grad().dtype() == DType::Float32);
      const auto want = pa[i].grad().to(wire).to(DType::Float32).to_vector<float>();
      const auto got = pb[i].grad().to_vector<float>();
      RANK_REQUIRE(got == want);
      RANK_REQUIRE(got != pa[i].grad().to_vector<float>());  // it did go through 16 bits
    }
  }
  dist::destroy_process_group();
}

TEST_CASE("nccl collectives wait for the compute stream, and the compute stream for them") {
  single_rank_env();
  if (!testing::gpu_or_skip("nccl stream ordering")) return;
  cuda::poison_new_memory(true);  // a read before the write would see NaN
  dist::init_process_group("nccl");
  Generator g(4);
  const Tensor a = randn({4096, 4096}, &g, Device::cuda(0));
  // About a teraflop queued on the compute stream (tens of milliseconds): the input of the
  // collective is written at its very end, long after the host has queued the collective.
  Tensor x = a;
  for (int i = 0; i < 8; ++i) x = matmul(x, a) * (1.0 / 64);
  const Tensor last = x.narrow(0, 0, 1).flatten().contiguous();
  std::vector<Tensor> outs;
  dist::all_gather(outs, last);          // runs on the communication stream
  const Tensor doubled = outs[0] * 2.0;  // queued on the compute stream right after
  const std::vector<float> want = last.to_vector<float>(), got = doubled.to_vector<float>();
  RANK_REQUIRE(want.size() == got.size());
  for (size_t i = 0; i < want.size(); ++i) RANK_REQUIRE(got[i] == 2 * want[i]);
  dist::destroy_process_group();
  cuda::poison_new_memory(false);
}

TEST_CASE("nccl at world size 1: gather, scatter, reduce, all_to_all and a subgroup") {
  single_rank_env();
  if (!testing::gpu_or_skip("nccl rooted collectives")) return;
  dist::init_process_group("nccl");
  const Tensor host = arange(0, 12);
  Tensor dev = host.to(Device::cuda(0));
  std::vector<Tensor> outs;
  dist::gather(outs, dev, 0);
  RANK_REQUIRE(outs.size() == 1);
  RANK_REQUIRE(outs[0].to(Device::cpu()).to_vector<float>() == host.to_vector<float>());
  Tensor got = zeros({12}, DType::Float32, Device::cuda(0));
  dist::scatter(got, {dev}, 0);
  RANK_REQUIRE(got.to(Device::cpu()).to_vector<float>() == host.to_vector<float>());
  dist::reduce(got, 0, dist::ReduceOp::Max);
  RANK_REQUIRE(got.to(Device::cpu()).to_vector<float>() == host.to_vector<float>());
  Tensor swapped = zeros({12}, DType::Float32, Device::cuda(0));
  dist::all_to_all(swapped, dev);
  RANK_REQUIRE(swapped.to(Device::cpu()).to_vector<float>() == host.to_vector<float>());
  auto sub = dist::new_group({0});
  RANK_REQUIRE(sub != nullptr);
  RANK_REQUIRE(sub->size() == 1);
  sub->all_reduce(dev).wait();
  RANK_REQUIRE(dev.to(Device::cpu()).to_vector<float>() == host.to_vector<float>());
  sub.reset();
  dist::destroy_process_group();
}

TEST_CASE("NCCL is opened only for a nccl group, and every function the backend calls resolves") {
  std::ifstream maps("/proc/self/maps");
  const std::string all((std::istreambuf_iterator<char>(maps)), std::istreambuf_iterator<char>());
  // Without a GPU no nccl group was made above, so nothing may have loaded NCCL yet (the
  // slash: a debug build maps our own libdist_Slibnccl_Ugroup.so).
  if (cuda::device_count() == 0) REQUIRE(all.find("/libnccl.so") == std::string::npos);
  // Opening NCCL looks up every function the backend calls.
  const std::string path = testing::library_or_skip("NCCL", "libnccl.so.", [] { return dist::nccl_path(); });
  if (path.empty()) return;
  REQUIRE(path.find("libnccl") != std::string::npos);
}

TEST_CASE("nccl: a communicator whose peer never joins fails at the timeout, not a hang") {
  if (!testing::gpu_or_skip("nccl communicator timeout")) return;
  dist::StoreOptions so;
  so.timeout = std::chrono::seconds(30);
  auto store = std::make_shared<dist::TCPStore>("127.0.0.1", 0, true, so);
  const auto t0 = std::chrono::steady_clock::now();
  // Rank 0 of 2; rank 1 never starts. The non-blocking communicator lets the wait end.
  RANK_REQUIRE_THROWS_WITH(
      dist::make_nccl_group(store, 0, 2, 0, std::chrono::seconds(3)),
      Catch::Contains("timed out after 3 s creating the NCCL communicator") && Catch::Contains("rank 0 (nccl)"));
  RANK_REQUIRE(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(15));
}
