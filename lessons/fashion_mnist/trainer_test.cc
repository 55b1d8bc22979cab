// The single-process trainer: it learns, and a run interrupted after any epoch (or killed
// with kill -9 at any moment) and resumed from its checkpoint ends bit-identical to an
// uninterrupted one.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "catch2/catch.hpp"
#include "lessons/fashion_mnist/trainer.h"
#include "nn/safetensors.h"
#include "tensor/ops.h"
#include "tests/testing/tmp_path.h"

using engine::testing::tmp_path;

using namespace engine;

namespace {
fmnist::TrainOptions small(const std::string& model) {
  fmnist::TrainOptions o;
  o.model = model;
  o.train_limit = 3000;
  o.test_limit = 2000;
  o.epochs = 2;
  return o;
}
}  // namespace

TEST_CASE("an MLP learns Fashion-MNIST from 3000 images in two epochs") {
  std::vector<fmnist::EpochStats> stats;
  fmnist::train(small("mlp"), [&](const fmnist::EpochStats& s) { stats.push_back(s); });
  REQUIRE(stats.size() == 2);
  REQUIRE(stats[1].train_loss < stats[0].train_loss);
  REQUIRE(stats[1].test_accuracy > 0.75);  // chance is 0.10
}

TEST_CASE("resuming from a checkpoint ends exactly where an uninterrupted run does") {
  for (const char* opt : {"sgd", "adam"}) {
    INFO("optimizer " << opt);
    fmnist::TrainOptions o = small("mlp");
    o.optimizer = opt;
    o.lr = std::string(opt) == "adam" ? 1e-3 : 0.05;
    o.epochs = 3;
    auto straight = fmnist::train(o, [](const fmnist::EpochStats&) {});

    o.checkpoint = tmp_path(std::string("resume_") + opt + ".safetensors");
    std::remove(o.checkpoint.c_str());
    // The run dies right after epoch 1 (its checkpoint is saved before on_epoch runs).
    struct Killed {};
    REQUIRE_THROWS_AS(fmnist::train(o, [](const fmnist::EpochStats&) { throw Killed{}; }), Killed);
    o.resume = true;
    std::vector<int> epochs_run;
    auto resumed = fmnist::train(o, [&](const fmnist::EpochStats& s) { epochs_run.push_back(s.epoch); });
    REQUIRE(epochs_run == std::vector<int>{2, 3});
    const auto a = straight->state_dict(), b = resumed->state_dict();
    for (const auto& [k, t] : a) {
      INFO(k);
      REQUIRE(b.at(k).to_vector<float>() == t.to_vector<float>());  // bit-identical
    }
  }
}

TEST_CASE(
    "under float16 the loss scale is saved with the checkpoint, so a resumed run ends where the straight one does") {
  // A first scale of 2^30 overflows float16 at once: the scaler skips steps and halves it
  // until it fits. Resumed with a fresh scaler, the run met those overflows again (and a
  // different scale rounds float16 gradients differently): the weights came out apart.
  fmnist::TrainOptions o = small("mlp");
  o.autocast = "fp16";
  o.init_scale = 1073741824;
  o.epochs = 3;
  auto straight = fmnist::train(o, [](const fmnist::EpochStats&) {});
  o.checkpoint = tmp_path("resume_fp16.safetensors");
  std::remove(o.checkpoint.c_str());
  struct Killed {};
  REQUIRE_THROWS_AS(fmnist::train(o, [](const fmnist::EpochStats&) { throw Killed{}; }), Killed);
  const nn::StateDict saved = nn::load_safetensors(o.checkpoint);
  REQUIRE(saved.at("scaler.scale").item() < 1073741824);  // it backed off in epoch 1
  o.resume = true;
  auto resumed = fmnist::train(o, [](const fmnist::EpochStats&) {});
  const auto a = straight->state_dict(), b = resumed->state_dict();
  for (const auto& [k, t] : a) {
    INFO(k);
    REQUIRE(b.at(k).to_vector<float>() == t.to_vector<float>());
  }
}

TEST_CASE("a checkpoint from another model is refused with both names") {
  fmnist::TrainOptions o = small("mlp");
  o.epochs = 1;
  o.train_limit = 200;
  o.checkpoint = tmp_path("other.safetensors");
  fmnist::train(o, [](const fmnist::EpochStats&) {});
  o.model = "cnn";
  o.resume = true;
  o.epochs = 2;
  REQUIRE_THROWS_WITH(fmnist::train(o, [](const fmnist::EpochStats&) {}),
                      Catch::Contains("holds a mlp trained with sgd, but this run asks for a cnn with sgd"));
  REQUIRE_THROWS_WITH(fmnist::make_model("rnn", 0), Catch::Contains("unknown model \"rnn\""));
}

TEST_CASE("malformed checkpoint metadata is refused, naming the file and the key, before any training") {
  fmnist::TrainOptions o = small("mlp");
  o.epochs = 1;
  o.train_limit = 200;
  o.checkpoint = tmp_path("meta.safetensors");
  std::remove(o.checkpoint.c_str());
  fmnist::train(o, [](const fmnist::EpochStats&) {});
  nn::Metadata meta;
  const nn::StateDict good = nn::load_safetensors(o.checkpoint, &meta);
  o.resume = true;
  o.epochs = 3;
  for (const char* bad : {"abc", "", "-1", "-1000000", "1.5", "99999999999999999999", "2000000", " 1"}) {
    INFO("epoch \"" << bad << "\"");
    nn::Metadata m = meta;
    m["epoch"] = bad;
    nn::save_safetensors(o.checkpoint, good, m);
    int trained = 0;
    REQUIRE_THROWS_WITH(fmnist::train(o, [&](const fmnist::EpochStats&) { ++trained; }),
                        "[train] checkpoint " + o.checkpoint + ": metadata \"epoch\": expected an integer in [0, " +
                            std::to_string(fmnist::kMaxEpochs) + "], got \"" + bad + "\"");
    REQUIRE(trained == 0);
  }
  nn::Metadata none = meta;
  none.erase("epoch");
  nn::save_safetensors(o.checkpoint, good, none);
  REQUIRE_THROWS_WITH(fmnist::train(o, [](const fmnist::EpochStats&) {}), Catch::Contains("has no \"epoch\""));
  nn::StateDict bad_generator = good;
  bad_generator["sampler.generator"] = from_vector(std::vector<int64_t>{1, 2, 7, 0});
  nn::save_safetensors(o.checkpoint, bad_generator, meta);
  REQUIRE_THROWS_WITH(fmnist::train(o, [](const fmnist::EpochStats&) {}),
                      Catch::Contains("sampler.generator is malformed"));
}

TEST_CASE("a run whose weights become NaN stops there and keeps the last good checkpoint") {
  fmnist::TrainOptions o = small("mlp");
  o.epochs = 1;
  o.train_limit = 500;
  o.checkpoint = tmp_path("diverged.safetensors");
  std::remove(o.checkpoint.c_str());
  fmnist::train(o, [](const fmnist::EpochStats&) {});
  const auto good = nn::load_safetensors(o.checkpoint);
  o.resume = true;
  o.epochs = 3;
  o.lr = 100;  // far too high: the weights reach NaN within the epoch
  int epochs_run = 0;
  REQUIRE_THROWS_WITH(fmnist::train(o, [&](const fmnist::EpochStats&) { ++epochs_run; }),
                      Catch::Contains("[train] training diverged in epoch 2 (mean loss nan): the model's") &&
                          Catch::Contains("Nothing was saved: " + o.checkpoint + " keeps what it held") &&
                          Catch::Contains("this run's peak is 100"));
  CHECK(epochs_run == 0);
  const auto kept = nn::load_safetensors(o.checkpoint);
  for (const auto& [k, t] : good) {
    INFO(k);
    REQUIRE(kept.at(k).to_vector<float>() == t.to_vector<float>());
  }
  CHECK(fmnist::first_non_finite(*fmnist::make_model("mlp", 0)).empty());
}

TEST_CASE("under float16 autocast, an epoch whose every step the GradScaler skipped stops the run") {
  fmnist::TrainOptions o = small("mlp");
  o.autocast = "fp16";
  o.lr = 100;  // the weights grow until the float16 forward overflows; then every step is skipped
  o.train_limit = 2000;
  o.epochs = 3;
  REQUIRE_THROWS_WITH(fmnist::train(o, [](const fmnist::EpochStats&) {}),
                      Catch::Contains("was taken: the GradScaler skipped all") &&
                          Catch::Contains("the weights no longer change") && Catch::Contains("--autocast bf16"));
  o.lr = 0.05;  // the same run at the usual rate trains
  o.epochs = 1;
  REQUIRE_NOTHROW(fmnist::train(o, [](const fmnist::EpochStats&) {}));
}

TEST_CASE("kill -9 at any moment, then resume: bit-identical to an uninterrupted run") {
  fmnist::TrainOptions o = small("mlp");
  o.epochs = 4;
  const auto straight = fmnist::train(o, [](const fmnist::EpochStats&) {})->state_dict();
  // Kill points spread over the run: mid-epoch, between epochs, during a save.
  for (int delay_ms : {0, 37, 90, 160}) {
    INFO("killed " << delay_ms << " ms after the first checkpoint appeared");
    o.checkpoint = tmp_path("killed_" + std::to_string(delay_ms) + ".safetensors");
    std::filesystem::remove(o.checkpoint);
    const pid_t pid = fork();
    if (pid == 0) {
      fmnist::train(o, [](const fmnist::EpochStats&) {});
      _exit(0);
    }
    while (!std::filesystem::exists(o.checkpoint)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    fmnist::TrainOptions r = o;
    r.resume = true;
    const auto resumed = fmnist::train(r, [](const fmnist::EpochStats&) {})->state_dict();
    for (const auto& [k, t] : straight) {
      INFO(k);
      REQUIRE(resumed.at(k).to_vector<float>() == t.to_vector<float>());  // bit-identical
    }
  }
}

namespace {
// The straight run's weights equal the stopped-and-resumed run's, bit for bit.
void require_same(const nn::StateDict& a, const nn::StateDict& b) {
  for (const auto& [k, t] : a) {
    INFO(k);
    REQUIRE(b.at(k).to_vector<float>() == t.to_vector<float>());
  }
}
}  // namespace

TEST_CASE("a run told to stop saves after that step, and resumed from there ends bit-identical") {
  // Stopped in the middle of epoch 2 (3000 images are 47 batches an epoch: after step 70),
  // and after epoch 1's last step (its evaluation and save then run in the resumed run).
  for (const char* model : {"mlp", "cnn"}) {
    fmnist::TrainOptions o = small(model);
    if (std::string(model) == "cnn") o.train_limit = 640, o.test_limit = 200;  // 10 batches an epoch, with BatchNorm
    const int64_t batches = (o.train_limit + 63) / 64;
    const auto straight = fmnist::train(o, [](const fmnist::EpochStats&) {})->state_dict();
    for (const int64_t stop_after : {batches + batches / 2, batches}) {
      INFO(model << ", stopped after step " << stop_after);
      o.checkpoint = tmp_path(std::string("stopped_") + model + ".safetensors");
      std::filesystem::remove(o.checkpoint);
      int64_t steps = 0;
      o.stop = [&] { return ++steps == stop_after; };
      std::vector<fmnist::StopPoint> stops;
      std::vector<int> epochs;
      fmnist::train(
          o, [&](const fmnist::EpochStats& s) { epochs.push_back(s.epoch); },
          [&](const fmnist::StopPoint& at) { stops.push_back(at); });
      REQUIRE(stops.size() == 1);
      CHECK(stops[0].epoch == int(1 + (stop_after - 1) / batches));
      CHECK(stops[0].batch == (stop_after - 1) % batches + 1);
      CHECK(stops[0].batches == batches);
      CHECK(epochs.size() == size_t((stop_after - 1) / batches));  // the stopped epoch did not end
      nn::Metadata meta;
      nn::load_safetensors(o.checkpoint, &meta);
      CHECK(meta.at("batch") == std::to_string(stops[0].batch));

      fmnist::TrainOptions r = o;
      r.stop = nullptr;
      r.resume = true;
      std::vector<fmnist::EpochStats> resumed_epochs;
      const auto resumed =
          fmnist::train(r, [&](const fmnist::EpochStats& s) { resumed_epochs.push_back(s); })->state_dict();
      REQUIRE(resumed_epochs.size() == size_t(o.epochs) - epochs.size());
      CHECK(resumed_epochs[0].epoch == stops[0].epoch);
      // An epoch whose steps all ran before the resume trained nothing in this run.
      CHECK((resumed_epochs[0].samples_per_s == 0) == (stops[0].batch == batches));
      require_same(straight, resumed);
    }
  }
}

TEST_CASE("a checkpoint saved in the middle of an epoch is resumed only with the same batches") {
  fmnist::TrainOptions o = small("mlp");
  o.checkpoint = tmp_path("stopped_batches.safetensors");
  std::filesystem::remove(o.checkpoint);
  int steps = 0;
  o.stop = [&] { return ++steps == 10; };
  fmnist::train(o, [](const fmnist::EpochStats&) {});
  o.stop = nullptr;
  o.resume = true;
  o.batch_size = 32;
  int trained = 0;
  REQUIRE_THROWS_WITH(fmnist::train(o, [&](const fmnist::EpochStats&) { ++trained; }),
                      Catch::Contains("was saved in the middle of epoch 1 (after batch 10) of a run with --batch 64 on "
                                      "3000 training images; this run has --batch 32 on 3000") &&
                          Catch::Contains("resume with --batch 64 and --train-limit 3000"));
  o.batch_size = 64;
  o.train_limit = 2000;
  REQUIRE_THROWS_WITH(fmnist::train(o, [&](const fmnist::EpochStats&) { ++trained; }),
                      Catch::Contains("this run has --batch 64 on 2000"));
  CHECK(trained == 0);
  // A position past the epoch's end is refused by name.
  o.train_limit = 3000;
  nn::Metadata meta;
  const nn::StateDict good = nn::load_safetensors(o.checkpoint, &meta);
  meta["batch"] = "48";
  nn::save_safetensors(o.checkpoint, good, meta);
  REQUIRE_THROWS_WITH(fmnist::train(o, [](const fmnist::EpochStats&) {}),
                      Catch::Contains("\"batch\" is 48, but an epoch has 47 batches"));
  // The epoch's losses so far: inf or nan (a float16 forward that overflowed) are kept as
  // they are; anything else that is not a number is refused by name.
  meta["batch"] = "10";
  meta["loss_sum"] = "x1";
  nn::save_safetensors(o.checkpoint, good, meta);
  REQUIRE_THROWS_WITH(fmnist::train(o, [](const fmnist::EpochStats&) {}),
                      Catch::Contains("metadata \"loss_sum\": expected a number"));
  meta["loss_sum"] = "inf";
  nn::save_safetensors(o.checkpoint, good, meta);
  std::vector<double> losses;
  fmnist::train(o, [&](const fmnist::EpochStats& s) { losses.push_back(s.train_loss); });
  REQUIRE(losses.size() == 2);
  CHECK(std::isinf(losses[0]));
  CHECK(std::isfinite(losses[1]));
}
