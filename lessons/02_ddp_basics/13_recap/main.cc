// Lesson 2, step 13, the recap: every step together. The single-process Fashion-MNIST
// trainer, made data-parallel with DistributedDataParallel. Each step of the lesson is one
// marked block below; the PyTorch line it mirrors is in the comment. Rank 0 also draws the
// loss and accuracy curves (curves.png, with the numbers in curves.csv).
//
// Rank 0 also saves the whole training state every --save-every steps and at each epoch's
// end (training_state.h); with --resume, or when the launcher restarts the job after a
// failure (`launch --max_restarts`), training continues from it and ends bit-identical to
// a run that was never interrupted (lesson 4, step 5). Told to stop (SIGTERM, Ctrl-C), every
// rank stops after the same step and rank 0 saves it first, so --resume loses nothing.
//
//   bazel run //lessons/02_ddp_basics:train                 # the same as :13_recap: 2 processes
//   bazel run //lessons/02_ddp_basics:train -- --epochs 3 --model cnn
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include "data/dataloader.h"
#include "data/fashion_mnist.h"
#include "dist/ddp.h"
#include "dist/dist.h"
#include "dist/distributed_sampler.h"
#include "dist/same_data.h"
#include "dist/stop_request.h"
#include "lessons/02_ddp_basics/13_recap/schedule.h"
#include "lessons/02_ddp_basics/13_recap/training_state.h"
#include "lessons/02_ddp_basics/13_recap/twin.h"
#include "lessons/common/curves.h"
#include "lessons/common/lesson.h"
#include "lessons/fashion_mnist/trainer.h"
#include "nn/file_claim.h"
#include "nn/loss.h"
#include "nn/safetensors.h"
#include "nn/sgd.h"
#include "tensor/cuda/runtime.h"
#include "tensor/input_file.h"
#include "tensor/ops.h"
#include "tools/flags/flags.h"

using namespace engine;
using namespace engine::nn;

struct Args {
  std::string model = "mlp", backend = "gloo", checkpoint, state, twin;
  int epochs = 10;
  int64_t batch = 64, train_limit = 0, test_limit = 0, save_every = 0;
  double lr = 0.1, warmup_epochs = 0;
  bool resume = false;
};

Args parse(int argc, char** argv) {
  Args a;
  Flags flags("13_recap",
              "Lesson 2's recap: Fashion-MNIST trained with DDP, one process per rank (run it under the launcher).");
  flags.add("--model", &a.model, {"mlp", "cnn"}, "the network");
  flags.add("--backend", &a.backend, {"gloo", "nccl"}, "the process group's backend");
  flags.add("--epochs", &a.epochs, 1, 100000, "epochs to train");
  flags.add("--batch", &a.batch, 1, 60000, "images per step and rank");
  flags.add("--lr", &a.lr, 0, 100, "peak learning rate (cosine decay)");
  flags.add("--warmup-epochs", &a.warmup_epochs, 0, 100000,
            "epochs over which the learning rate rises linearly from 0 to its peak (lesson 2, step 16)");
  flags.add("--train-limit", &a.train_limit, 0, 60000, "train on the first N images (0: all)");
  flags.add("--test-limit", &a.test_limit, 0, 10000, "evaluate on the first N test images (0: all)");
  flags.add("--checkpoint", &a.checkpoint,
            "where rank 0 saves the model (default: out/02_ddp_basics/ddp_MODEL.safetensors)");
  flags.add("--state", &a.state,
            "the whole training state, for resuming (default: out/02_ddp_basics/state_MODEL.safetensors)");
  flags.add("--save-every", &a.save_every, 0, int64_t(1) << 40,
            "steps between saves of the training state (0: epoch ends only)");
  flags.add("--resume", &a.resume, "continue from the training state (automatic when the launcher restarts the job)");
  flags.add("--twin", &a.twin, "also write what the PyTorch twin needs into this folder (lesson 2, step 14)");
  flags.parse_or_exit(argc, argv);
  return a;
}

// curves.csv and curves.png: this run's curves, beside one process's when a run on one
// process (NPROC=1) with the same settings has left curves_1_process.csv here (and its
// settings in curves_1_process.settings: curves of another model or learning rate beside
// these would compare nothing).
void draw_curves(const std::string& dir, const recap::Settings& settings, int world,
                 const std::vector<lessons::EpochPoint>& curves) {
  lessons::write_curves_csv(dir + "/curves.csv", curves);
  const std::string mine = world == 1 ? "1 process" : "DDP x" + std::to_string(world);
  const std::string alone_csv = dir + "/curves_1_process.csv", alone_settings = dir + "/curves_1_process.settings";
  const std::string my_settings = recap::settings_text(settings);
  if (world == 1) {
    lessons::write_curves_csv(alone_csv, curves);
    std::ofstream f(alone_settings);
    f << my_settings << "\n";
    f.close();
    ENGINE_REQUIRE(f.good(), "[recap] cannot write ", alone_settings);
  }
  std::vector<lessons::CurveRun> runs = {{mine, curves}};
  std::string not_beside;  // why one process's curves are not drawn beside these
  if (world > 1 && std::ifstream(alone_csv).good()) {
    std::string theirs;
    std::getline(std::ifstream(alone_settings), theirs);
    if (theirs == my_settings)
      runs.push_back({"1 process", lessons::read_curves_csv(alone_csv)});
    else
      not_beside = "; " + alone_csv + " is from a run with " + (theirs.empty() ? "unknown settings" : theirs) +
                   ", so it is not drawn beside this one (" + my_settings + "): run NPROC=1 with these flags";
  } else if (world > 1) {
    not_beside = "; run it once with NPROC=1 to draw one process beside it";
  }
  lessons::save_curves_png(dir + "/curves.png", runs, "Fashion-MNIST " + settings.model);
  if (runs.size() == 2)
    std::printf("curves drawn by rank 0: %s/curves.png, %s beside 1 process (%s)\n", dir.c_str(), mine.c_str(),
                alone_csv.c_str());
  else
    std::printf("curves drawn by rank 0: %s/curves.png (numbers in curves.csv)%s\n", dir.c_str(), not_beside.c_str());
}

int main(int argc, char** argv) try {
  const Args args = parse(argc, argv);

  // ---- Init the process group.            dist.init_process_group(backend="nccl")
  dist::init_process_group(args.backend);
  dist::catch_stop_signals();  // SIGTERM or Ctrl-C: stop after a step, saved (below)
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
  // Index i must be the same image on every rank: on several machines, each reads its own copy.
  dist::require_same_data(dist::default_group(), train->inputs(), train->targets(),
                          "[recap] the training set (" + data::fashion_mnist_root() + ")");
  auto sampler = std::make_shared<dist::DistributedSampler>(train->size());
  data::DataLoader loader(train, {.batch_size = args.batch}, sampler);

  if (rank == 0)
    std::printf("Fashion-MNIST, %s, DDP over %d process%s (%s), batch %lld per rank (%lld in all), %d epochs\n",
                args.model.c_str(), world, world == 1 ? "" : "es", args.backend.c_str(), (long long)args.batch,
                (long long)(args.batch * world), args.epochs);

  // ---- Resume: the whole training state, if there is one to continue.   (torchrun leaves this to you)
  const std::string dir = lessons::output_dir("02_ddp_basics");
  const std::string state_path = args.state.empty() ? dir + "/state_" + args.model + ".safetensors" : args.state;
  const recap::Settings settings{args.model, args.epochs, args.batch, args.train_limit, args.lr, args.warmup_epochs};
  recap::require_same_settings(settings);  // one machine's launcher may have been given other flags
  const std::string checkpoint_path =
      args.checkpoint.empty() ? dir + "/ddp_" + args.model + ".safetensors" : args.checkpoint;
  // Rank 0 saves both: a bad path is named now, not after the training, and another job
  // saving to the same training state (the demo started twice in one folder) is refused.
  std::unique_ptr<nn::FileClaim> state_claim;
  if (rank == 0) {
    nn::check_save_path(state_path);
    nn::check_save_path(checkpoint_path);
    nn::check_distinct_save_paths(state_path, "--state (the training state)", checkpoint_path,
                                  "--checkpoint (the final weights)");
    state_claim = std::make_unique<nn::FileClaim>(state_path, "the training state, --state");
  }
  // TORCHELASTIC_RESTART_COUNT, or the restart a machine started afresh joined (dist.h).
  const bool restarted = dist::restart_count() > 0;
  recap::TrainingState state;
  const bool resuming = (args.resume || restarted) && engine::anything_at(state_path);
  if (resuming) {
    state = recap::load_training_state(state_path, settings, world, rank);
    ddp.module().load_state_dict(state.model);
    opt.load_state_dict(state.optimizer);
    if (rank == 0 && state.epoch >= args.epochs)
      std::printf("resumed from %s: all %d epochs were done (step %lld); nothing is left to train\n",
                  state_path.c_str(), args.epochs, (long long)state.step);
    else if (rank == 0)
      std::printf("resumed from %s: epoch %d, after batch %lld (step %lld)%s\n", state_path.c_str(), state.epoch + 1,
                  (long long)state.batch, (long long)state.step, restarted ? ", after a restart by the launcher" : "");
  } else if (args.resume && rank == 0) {
    std::printf("--resume: no training state at %s yet; starting from the beginning\n", state_path.c_str());
  }
  recap::require_same_start(state, resuming, state_path);
  std::vector<lessons::EpochPoint>& curves = state.curves;
  // Weights that reached NaN or inf (a learning rate too high) never come back: every later
  // step is NaN too. The run stops before it saves them over the last good state. DDP keeps
  // the replicas identical, so every rank sees the same and stops at the same point.
  auto stop_if_diverged = [&](const std::string& when) {
    const std::string bad = fmnist::first_non_finite(ddp.module());
    if (bad.empty()) return;
    if (rank == 0 && !curves.empty()) draw_curves(dir, settings, world, curves);  // the picture shows where
    ENGINE_REQUIRE(rank != 0, "training diverged ", when, ": the model's \"", bad,
                   "\" holds NaN or inf, and every later step would too. Nothing was saved: ", state_path, " and ",
                   checkpoint_path, " keep what they held. Try a smaller --lr (this run's peak is ", args.lr,
                   ") or a warm-up (--warmup-epochs 1).");
    // The others wait for rank 0 to leave (its barrier never comes), so that its explanation
    // is the first error and the one the launcher names.
    try {
      dist::barrier();
    } catch (const std::exception&) {}
    ENGINE_REQUIRE(false, "training diverged ", when, " (on every rank: rank 0 says more)");
  };
  // Every rank calls it (the loss sums are gathered); rank 0 writes, and times the writes.
  std::vector<double> save_ms;
  auto save_state = [&](const std::string& when) {
    stop_if_diverged(when);
    const std::vector<double> sums = recap::gather_loss_sums(state.loss_sum, device);
    if (rank != 0) return;
    const auto t0 = std::chrono::steady_clock::now();
    recap::save_training_state(state_path, state, sums, ddp.module().state_dict(), opt.state_dict(), settings);
    save_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  };
  // ---- For the PyTorch twin (step 14): step-0 weights, each epoch's order, each step's loss.
  recap::TwinRecorder twin(args.twin, rank, world);
  ENGINE_REQUIRE(!twin.on() || state.step == 0, "[13_recap] --twin records a run from its start; it cannot resume one");
  twin.start(ddp.module(), settings, train->size(), loader.size());
  for (int epoch = state.epoch; epoch < args.epochs; ++epoch) {
    // ---- Reshuffle every epoch.            sampler.set_epoch(epoch)
    sampler->set_epoch(epoch);
    if (twin.on()) twin.epoch_order(sampler->order());
    const auto t0 = std::chrono::steady_clock::now();
    double& loss_sum = state.loss_sum;
    int64_t& batches = state.batch;
    const int64_t resumed_at = batches;
    auto it = loader.begin();
    for (int64_t skip = 0; skip < resumed_at; ++skip) ++it;  // the batches done before the restart
    for (; it != loader.end(); ++it) {
      const data::Example b = *it;
      // Cosine decay (as the one-process trainer), after a linear warm-up when asked for one.
      const int64_t step_no = epoch * loader.size() + batches;
      opt.set_lr(recap::learning_rate(args.lr, step_no, args.epochs * loader.size(),
                                      int64_t(args.warmup_epochs * double(loader.size()))));
      twin.before_step(state.step, ddp.module(), opt);
      opt.zero_grad();
      Variable loss = cross_entropy(ddp(Variable(b.input.to(device))), b.target.to(device));
      // ---- Gradients sync themselves: backward all-reduces them, bucket by bucket.
      loss.backward();
      opt.step();
      loss_sum += loss.item();
      twin.step_loss(loss.item());
      twin.after_step(state.step, ddp.module());
      ++batches;
      ++state.step;
      if (args.save_every > 0 && state.step % args.save_every == 0) save_state("by step " + std::to_string(state.step));
      // ---- Asked to stop (SIGTERM from a scheduler, Ctrl-C): every rank stops after this
      // same step, rank 0 saves it, and --resume continues from it exactly. Asked every 8
      // steps: the question is a collective (an int all-reduced, microseconds), and 8 steps
      // take milliseconds, well within the seconds a scheduler allows.
      if (state.step % 8 == 0 && dist::stop_requested(device)) {
        save_state("by step " + std::to_string(state.step));
        if (rank == 0)
          std::printf(
              "asked to stop by %s: stopped after step %lld (epoch %d, batch %lld of %lld); the training state "
              "is saved in %s, and the same command with --resume continues from this step\n",
              dist::stop_signal().empty() ? "a signal to another rank" : dist::stop_signal().c_str(),
              (long long)state.step, epoch + 1, (long long)batches, (long long)loader.size(), state_path.c_str());
        dist::destroy_process_group();
        return dist::kStoppedOnRequest;
      }
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const int64_t trained = batches - resumed_at;  // in this run, for the throughput
    // The epoch's mean loss over all ranks (each rank saw different data).
    Tensor stats = from_vector(std::vector<float>{float(loss_sum / double(std::max<int64_t>(batches, 1)))});
    dist::all_reduce(stats, dist::ReduceOp::Avg);
    const double loss = std::isnan(stats.item()) ? std::nan("") : stats.item();  // "nan", never printf's "-nan"
    // ---- Rank 0 logs (all replicas are identical, so one evaluation says it all).
    double acc = 0;
    if (rank == 0) {
      acc = fmnist::test_accuracy(ddp.module(), args.test_limit);
      if (trained > 0)
        std::printf("epoch %2d  loss %.4f  test accuracy %.2f%%  %8.0f samples/s (all ranks)\n", epoch + 1, loss,
                    100 * acc, double(trained * args.batch * world) / seconds);
      else  // resumed after the epoch's last step: its steps ran before
        std::printf("epoch %2d  loss %.4f  test accuracy %.2f%%  (its steps ran before the resume)\n", epoch + 1, loss,
                    100 * acc);
      std::fflush(stdout);
      lessons::report("loss_epoch_" + std::to_string(epoch + 1), loss);
      lessons::report("accuracy_epoch_" + std::to_string(epoch + 1), 100 * acc);
    }
    curves.push_back({epoch + 1, loss, 100 * acc});
    state.epoch = epoch + 1, state.batch = 0, state.loss_sum = 0;  // the next epoch, from its start
    save_state("in epoch " + std::to_string(epoch + 1));
    dist::barrier();  // the others wait while rank 0 evaluates and saves
  }

  // ---- Save only on rank 0.               if rank == 0: torch.save(model.module.state_dict(), ...)
  const std::string& path = checkpoint_path;
  dist::save_on_rank0(path, ddp.module().state_dict());
  twin.finish(ddp.module());
  if (rank == 0) {
    lessons::report("steps", double(state.step));  // optimizer steps in all (lesson 2, step 16)
    std::printf("checkpoint saved by rank 0: %s\n", path.c_str());
    draw_curves(dir, settings, world, curves);
    if (!save_ms.empty()) {
      std::sort(save_ms.begin(), save_ms.end());
      if (save_ms.size() == 1)
        std::printf("training state saved once by rank 0 (%s), in %.1f ms\n", state_path.c_str(), save_ms[0]);
      else
        std::printf("training state saved %zu times by rank 0 (%s), %.1f ms each (median)\n", save_ms.size(),
                    state_path.c_str(), save_ms[save_ms.size() / 2]);
    }
  }

  // ---- Clean up.                          dist.destroy_process_group()
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "13_recap: %s\n", e.what());
  return 1;
}
