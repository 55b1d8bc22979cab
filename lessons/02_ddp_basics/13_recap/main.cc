// Lesson 2, step 13, the recap: every step together. The single-process Fashion-MNIST
// trainer, made data-parallel with DistributedDataParallel. Each step of the lesson is one
// marked block below; the PyTorch line it mirrors is in the comment. Rank 0 also draws the
// loss and accuracy curves (curves.png, with the numbers in curves.csv).
//
//   bazel run //lessons/02_ddp_basics:train                 # the same as :13_recap: 2 processes
//   bazel run //lessons/02_ddp_basics:train -- --epochs 3 --model cnn
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "data/dataloader.h"
#include "data/fashion_mnist.h"
#include "dist/ddp.h"
#include "dist/dist.h"
#include "dist/distributed_sampler.h"
#include "lessons/common/curves.h"
#include "lessons/common/lesson.h"
#include "lessons/fashion_mnist/trainer.h"
#include "nn/loss.h"
#include "nn/sgd.h"
#include "tensor/cuda/runtime.h"
#include "tensor/ops.h"
#include "tools/flags/flags.h"

using namespace engine;
using namespace engine::nn;

struct Args {
  std::string model = "mlp", backend = "gloo", checkpoint;
  int epochs = 10;
  int64_t batch = 64, train_limit = 0, test_limit = 0;
  double lr = 0.1;
};

Args parse(int argc, char** argv) {
  Args a;
  Flags flags("13_recap", "Lesson 2's recap: Fashion-MNIST trained with DDP, one process per rank (run it under the launcher).");
  flags.add("--model", &a.model, {"mlp", "cnn"}, "the network");
  flags.add("--backend", &a.backend, {"gloo", "nccl"}, "the process group's backend");
  flags.add("--epochs", &a.epochs, 1, 100000, "epochs to train");
  flags.add("--batch", &a.batch, 1, 60000, "images per step and rank");
  flags.add("--lr", &a.lr, 0, 100, "peak learning rate (cosine decay)");
  flags.add("--train-limit", &a.train_limit, 0, 60000, "train on the first N images (0: all)");
  flags.add("--test-limit", &a.test_limit, 0, 10000, "evaluate on the first N test images (0: all)");
  flags.add("--checkpoint", &a.checkpoint, "where rank 0 saves the model (default: out/02_ddp_basics/ddp_MODEL.safetensors)");
  flags.parse_or_exit(argc, argv);
  return a;
}

int main(int argc, char** argv) try {
  const Args args = parse(argc, argv);

  // ---- Init the process group.            dist.init_process_group(backend="nccl")
  dist::init_process_group(args.backend);
  // ---- Rank and world size.               rank = dist.get_rank(); world = dist.get_world_size()
  const int rank = dist::get_rank(), world = dist::get_world_size();
  // ---- Pin each process to one device.    torch.cuda.set_device(local_rank)
  const Device device = args.backend == "nccl" ? Device::cuda(dist::get_local_rank()) : Device::cpu();
  if (device.is_cuda()) cuda::set_device(device.index);

  // ---- The model, the same on every rank, wrapped in DDP.   model = DDP(model.to(device))
  auto model = fmnist::make_model(args.model, /*seed=*/0);
  model->to(device);
  dist::DistributedDataParallel ddp(model);  // broadcasts rank 0's weights to everyone
  SGD opt(ddp.parameters(), {.lr = args.lr, .momentum = 0.9});

  // ---- A DistributedSampler: each rank its own slice.      sampler = DistributedSampler(dataset)
  std::shared_ptr<data::TensorDataset> train = data::fashion_mnist(true);
  if (args.train_limit > 0)
    train = std::make_shared<data::TensorDataset>(train->inputs().narrow(0, 0, args.train_limit),
                                                  train->targets().narrow(0, 0, args.train_limit));
  auto sampler = std::make_shared<dist::DistributedSampler>(train->size());
  data::DataLoader loader(train, {.batch_size = args.batch}, sampler);

  if (rank == 0)
    std::printf("Fashion-MNIST, %s, DDP over %d processes (%s), batch %lld per rank (%lld in all), %d epochs\n",
                args.model.c_str(), world, args.backend.c_str(), (long long)args.batch, (long long)(args.batch * world),
                args.epochs);
  std::vector<lessons::EpochPoint> curves;
  for (int epoch = 0; epoch < args.epochs; ++epoch) {
    // ---- Reshuffle every epoch.            sampler.set_epoch(epoch)
    sampler->set_epoch(epoch);
    const auto t0 = std::chrono::steady_clock::now();
    double loss_sum = 0;
    int64_t batches = 0;
    for (const data::Example& b : loader) {
      const double progress = double(epoch * loader.size() + batches) / double(args.epochs * loader.size());
      opt.set_lr(args.lr * 0.5 * (1 + std::cos(M_PI * progress)));  // cosine decay, as the one-process trainer
      opt.zero_grad();
      Variable loss = cross_entropy(ddp(Variable(b.input.to(device))), b.target.to(device));
      // ---- Gradients sync themselves: backward all-reduces them, bucket by bucket.
      loss.backward();
      opt.step();
      loss_sum += loss.item();
      ++batches;
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // The epoch's mean loss over all ranks (each rank saw different data).
    Tensor stats = from_vector(std::vector<float>{float(loss_sum / double(std::max<int64_t>(batches, 1)))});
    dist::all_reduce(stats, dist::ReduceOp::Avg);
    // ---- Rank 0 logs (all replicas are identical, so one evaluation says it all).
    if (rank == 0) {
      const double acc = fmnist::test_accuracy(ddp.module(), args.test_limit);
      std::printf("epoch %2d  loss %.4f  test accuracy %.2f%%  %8.0f samples/s (all ranks)\n", epoch + 1, stats.item(),
                  100 * acc, double(batches * args.batch * world) / seconds);
      curves.push_back({epoch + 1, stats.item(), 100 * acc});
      std::fflush(stdout);
    }
    dist::barrier();  // the others wait while rank 0 evaluates
  }

  // ---- Save only on rank 0.               if rank == 0: torch.save(model.module.state_dict(), ...)
  const std::string dir = lessons::output_dir("02_ddp_basics");
  const std::string path = args.checkpoint.empty() ? dir + "/ddp_" + args.model + ".safetensors" : args.checkpoint;
  dist::save_on_rank0(path, ddp.module().state_dict());
  if (rank == 0) {
    std::printf("checkpoint saved by rank 0: %s\n", path.c_str());
    lessons::write_curves_csv(dir + "/curves.csv", curves);
    lessons::save_curves_png(dir + "/curves.png", curves, "Fashion-MNIST " + args.model + ", DDP x" + std::to_string(world));
    std::printf("curves drawn by rank 0: %s/curves.png (numbers in curves.csv)\n", dir.c_str());
  }

  // ---- Clean up.                          dist.destroy_process_group()
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "13_recap: %s\n", e.what());
  return 1;
}
