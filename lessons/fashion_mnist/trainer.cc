#include "lessons/fashion_mnist/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>

#include "data/dataloader.h"
#include "data/fashion_mnist.h"
#include "nn/adam.h"
#include "nn/autocast.h"
#include "nn/batchnorm.h"
#include "nn/conv.h"
#include "nn/grad_scaler.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/safetensors.h"
#include "nn/sgd.h"
#include "tensor/generator_state.h"
#include "tensor/input_file.h"
#include "tensor/ops.h"
#include "tensor/parse.h"

namespace fmnist {

using namespace engine;
using namespace engine::nn;
using engine::data::DataLoader;
using engine::data::Example;

std::shared_ptr<Module> make_model(const std::string& name, uint64_t seed) {
  Generator g(seed);
  if (name == "mlp") {
    return std::make_shared<Sequential>(
        std::vector<ModulePtr>{std::make_shared<Flatten>(), std::make_shared<Linear>(784, 256, true, &g),
                               std::make_shared<ReLU>(), std::make_shared<Linear>(256, 256, true, &g),
                               std::make_shared<ReLU>(), std::make_shared<Linear>(256, 10, true, &g)});
  }
  if (name == "cnn") {
    // Two conv blocks (28 -> 14 -> 7), then a small classifier.
    return std::make_shared<Sequential>(std::vector<ModulePtr>{
        std::make_shared<Conv2d>(1, 32, 3, 1, 1, true, &g), std::make_shared<BatchNorm2d>(32), std::make_shared<ReLU>(),
        std::make_shared<MaxPool2d>(2), std::make_shared<Conv2d>(32, 64, 3, 1, 1, true, &g),
        std::make_shared<BatchNorm2d>(64), std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(2),
        std::make_shared<Flatten>(), std::make_shared<Linear>(64 * 7 * 7, 128, true, &g), std::make_shared<ReLU>(),
        std::make_shared<Linear>(128, 10, true, &g)});
  }
  throw Error("[make_model] unknown model \"" + name + "\"; expected \"mlp\" or \"cnn\"");
}

double test_accuracy(Module& model, int64_t limit) {
  // Read (and decompress) the test set once per process, not once per evaluation.
  static const std::shared_ptr<data::TensorDataset> test = data::fashion_mnist(false);
  model.eval();
  autograd::NoGradGuard no_grad;
  const int64_t n = limit > 0 ? std::min(limit, test->size()) : test->size();
  // The batches go where the model is (a GPU, in a run over nccl).
  const auto params = model.parameters();
  const Device device = params.empty() ? Device::cpu() : params[0].data().device();
  int64_t correct = 0;
  for (int64_t start = 0; start < n; start += 1000) {
    const int64_t len = std::min<int64_t>(1000, n - start);
    const Tensor x = test->inputs().narrow(0, start, len).to(device),
                 y = test->targets().narrow(0, start, len).to(device);
    correct += int64_t(sum(eq(argmax(model(Variable(x)).data(), 1), y)).item());
  }
  model.train();
  return double(correct) / double(n);
}

namespace {

std::unique_ptr<Optimizer> make_optimizer(const TrainOptions& o, Module& model) {
  if (o.optimizer == "sgd") return std::make_unique<SGD>(model.parameters(), SGDOptions{.lr = o.lr, .momentum = 0.9});
  if (o.optimizer == "adam") return std::make_unique<Adam>(model.parameters(), AdamOptions{.lr = o.lr});
  throw Error("[train] unknown optimizer \"" + o.optimizer + "\"; expected \"sgd\" or \"adam\"");
}

// Where a checkpoint leaves the run: `epoch` epochs done, then `batch` steps of the next
// (0 at an epoch's end), whose losses add up to `loss_sum`.
struct Position {
  int epoch = 0;
  int64_t batch = 0;
  double loss_sum = 0;
};

// `sampler` is the sampler's generator as the next epoch began: that epoch's order is
// drawn from it, so a run resumed in its middle visits the same batches.
void save(const TrainOptions& o, const Module& model, const Optimizer& opt, const nn::GradScaler& scaler,
          const Tensor& sampler, const Position& at, int64_t train_size) {
  StateDict all;
  for (auto& [k, t] : model.state_dict()) all["model." + k] = t;
  for (auto& [k, t] : opt.state_dict()) all["optimizer." + k] = t;
  for (auto& [k, t] : scaler.state_dict()) all["scaler." + k] = t;  // none unless --autocast fp16
  all["sampler.generator"] = sampler;
  char loss_sum[32];  // "%.17g" round-trips exactly; a step whose float16 forward overflowed made it inf or nan
  std::snprintf(loss_sum, sizeof loss_sum, "%.17g", at.loss_sum);
  if (!std::isfinite(at.loss_sum)) std::snprintf(loss_sum, sizeof loss_sum, std::isnan(at.loss_sum) ? "nan" : "inf");
  save_safetensors(o.checkpoint, all,
                   {{"epoch", std::to_string(at.epoch)},
                    {"batch", std::to_string(at.batch)},
                    {"loss_sum", loss_sum},
                    {"batch_size", std::to_string(o.batch_size)},
                    {"train_size", std::to_string(train_size)},
                    {"model", o.model},
                    {"optimizer", o.optimizer}});
}

// The batch a checkpoint was saved after, within its epoch (0 at an epoch's end, and in a
// checkpoint from before the key existed). One saved in the middle of an epoch is resumed
// only with the batch size and the training set it was saved with: its position counts
// their batches.
Position checkpoint_position(const Metadata& meta, const std::string& path, const TrainOptions& o, int64_t train_size,
                             int64_t batches) {
  Position at;
  at.epoch = checkpoint_epoch(meta, path);
  if (!meta.count("batch")) return at;
  const std::string where = "[train] checkpoint " + path + ": metadata ";
  at.batch = parse_int(meta.at("batch"), where + "\"batch\"", 0, std::numeric_limits<int32_t>::max());
  if (at.batch == 0) return at;
  ENGINE_REQUIRE(meta.count("batch_size") && meta.count("train_size") && meta.count("loss_sum"), where,
                 "has \"batch\" but not \"batch_size\", \"train_size\" and \"loss_sum\"");
  const int64_t batch_size = parse_int(meta.at("batch_size"), where + "\"batch_size\"", 1, 1 << 30);
  const int64_t size = parse_int(meta.at("train_size"), where + "\"train_size\"", 1, 1 << 30);
  ENGINE_REQUIRE(batch_size == o.batch_size && size == train_size, "[train] checkpoint ", path,
                 " was saved in the middle of epoch ", at.epoch + 1, " (after batch ", at.batch,
                 ") of a run with --batch ", batch_size, " on ", size, " training images; this run has --batch ",
                 o.batch_size, " on ", train_size,
                 ", whose batches differ, so it cannot take up that epoch where it stopped: resume with --batch ",
                 batch_size, " and --train-limit ", size);
  ENGINE_REQUIRE(at.batch <= batches, where, "\"batch\" is ", at.batch, ", but an epoch has ", batches, " batches");
  const std::string& sum = meta.at("loss_sum");
  at.loss_sum = sum == "nan"   ? std::nan("")
                : sum == "inf" ? HUGE_VAL
                               : parse_double(sum, where + "\"loss_sum\"", 0, std::numeric_limits<double>::max());
  return at;
}

// Restores a checkpoint; returns where it leaves the run (nothing done when there is none).
Position restore(const TrainOptions& o, Module& model, Optimizer& opt, nn::GradScaler& scaler, Generator& g,
                 int64_t train_size, int64_t batches) {
  if (!o.resume || o.checkpoint.empty() || !engine::anything_at(o.checkpoint)) return {};
  Metadata meta;
  const StateDict all = load_safetensors(o.checkpoint, &meta);
  ENGINE_REQUIRE(meta["model"] == o.model && meta["optimizer"] == o.optimizer, "[train] checkpoint ", o.checkpoint,
                 " holds a ", meta["model"], " trained with ", meta["optimizer"], ", but this run asks for a ", o.model,
                 " with ", o.optimizer);
  const Position at = checkpoint_position(meta, o.checkpoint, o, train_size, batches);
  StateDict model_sd, opt_sd, scaler_sd;
  for (auto& [k, t] : all) {
    if (k.rfind("model.", 0) == 0)
      model_sd[k.substr(6)] = t;
    else if (k.rfind("optimizer.", 0) == 0)
      opt_sd[k.substr(10)] = t;
    else if (k.rfind("scaler.", 0) == 0)
      scaler_sd[k.substr(7)] = t;
  }
  ENGINE_REQUIRE(all.count("sampler.generator"), "[train] checkpoint ", o.checkpoint, " has no sampler.generator");
  model.load_state_dict(model_sd);
  opt.load_state_dict(opt_sd);
  // The loss scale where the run left it (a checkpoint of a run without float16 has none:
  // the scaler then starts afresh).
  if (!scaler_sd.empty()) scaler.load_state_dict(scaler_sd);
  g.set_state(parse_generator_state(all.at("sampler.generator"), "[train] checkpoint's sampler.generator"));
  return at;
}

// What a run that stops on an error says of its checkpoint: it keeps its last good state.
std::string nothing_saved(const TrainOptions& o) {
  return o.checkpoint.empty() ? "" : "Nothing was saved: " + o.checkpoint + " keeps what it held. ";
}

// A run whose weights hold NaN or inf cannot come back: it stops before it saves, and its
// checkpoint keeps its last good state.
void require_finite(const TrainOptions& o, const Module& model, int epoch, double mean_loss) {
  const std::string diverged = first_non_finite(model);
  ENGINE_REQUIRE(diverged.empty(), "[train] training diverged in epoch ", epoch, " (mean loss ",
                 std::isnan(mean_loss) ? "nan" : std::to_string(mean_loss), "): the model's \"", diverged,
                 "\" holds NaN or inf, and every later step would too. ", nothing_saved(o),
                 "Try a smaller learning rate (this run's peak is ", o.lr, ").");
}

}  // namespace

std::string first_non_finite(const Module& model) {
  for (const auto& [name, t] : model.state_dict())
    if (!all_finite(t)) return name;
  return "";
}

int checkpoint_epoch(const Metadata& meta, const std::string& path) {
  // Every value read from the file is checked before it steers the run: a negative or
  // huge epoch would otherwise skip training or loop for a million epochs.
  ENGINE_REQUIRE(meta.count("epoch"), "[train] checkpoint ", path, " has no \"epoch\" in its metadata");
  return int(parse_int(meta.at("epoch"), "[train] checkpoint " + path + ": metadata \"epoch\"", 0, kMaxEpochs));
}

std::shared_ptr<Module> train(const TrainOptions& o, const std::function<void(const EpochStats&)>& on_epoch,
                              const std::function<void(const StopPoint&)>& on_stop) {
  auto full = data::fashion_mnist(true);
  std::shared_ptr<const data::Dataset> train_set = full;
  if (o.train_limit > 0 && o.train_limit < full->size())
    train_set = std::make_shared<data::TensorDataset>(full->inputs().narrow(0, 0, o.train_limit),
                                                      full->targets().narrow(0, 0, o.train_limit));
  auto sampler = std::make_shared<data::RandomSampler>(train_set->size(), o.seed);
  DataLoader loader(train_set, {.batch_size = o.batch_size}, sampler);
  auto model = make_model(o.model, o.seed);
  auto opt = make_optimizer(o, *model);
  // float16's gradients need scaling; bfloat16's do not.
  nn::GradScaler scaler({.init_scale = o.init_scale, .enabled = o.autocast == "fp16"});
  const Position resumed = restore(o, *model, *opt, scaler, sampler->generator(), train_set->size(), loader.size());
  const bool tty = o.progress && isatty(STDERR_FILENO);

  for (int epoch = resumed.epoch + 1; epoch <= o.epochs; ++epoch) {
    const auto t0 = std::chrono::steady_clock::now();
    const bool first = epoch == resumed.epoch + 1;
    double loss_sum = first ? resumed.loss_sum : 0;
    int64_t batches = first ? resumed.batch : 0, trained = 0, stepped = 0;
    const Tensor epoch_sampler = generator_state(sampler->generator());  // before the epoch's order is drawn
    auto it = loader.begin();
    for (int64_t skip = 0; skip < batches; ++skip) ++it;  // the steps done before the resume
    for (; it != loader.end(); ++it) {
      const Example batch = *it;
      // Cosine schedule: lr falls smoothly from its peak to 0 over all the run's steps,
      // which settles the weights at the end instead of leaving them bouncing.
      const double progress = double((epoch - 1) * loader.size() + batches) / double(o.epochs * loader.size());
      opt->set_lr(o.lr * 0.5 * (1 + std::cos(M_PI * progress)));
      opt->zero_grad();
      Variable loss;
      {
        nn::Autocast ac(o.autocast == "fp16" ? DType::Float16 : DType::BFloat16, o.autocast != "off");
        loss = cross_entropy((*model)(Variable(batch.input)), batch.target);
      }
      scaler.scale(loss).backward();
      stepped += scaler.step(*opt) ? 1 : 0;
      scaler.update();
      loss_sum += loss.item();
      ++batches;
      trained += batch.target.size(0);
      if (tty && batches % 50 == 0)
        std::fprintf(stderr, "\r  epoch %d  %6lld/%lld  loss %.4f", epoch,
                     (long long)std::min(batches * o.batch_size, train_set->size()), (long long)train_set->size(),
                     loss_sum / double(batches));
      if (o.stop && o.stop()) {  // told to stop: saved here, in the middle of the epoch
        if (tty) std::fprintf(stderr, "\r%60s\r", "");
        require_finite(o, *model, epoch, loss_sum / double(batches));
        if (!o.checkpoint.empty())
          save(o, *model, *opt, scaler, epoch_sampler, {epoch - 1, batches, loss_sum}, train_set->size());
        if (on_stop) on_stop({epoch, batches, loader.size()});
        return model;
      }
    }
    if (tty) std::fprintf(stderr, "\r%60s\r", "");
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EpochStats s{epoch, loss_sum / double(std::max<int64_t>(batches, 1)), test_accuracy(*model, o.test_limit),
                 trained > 0 ? double(trained) / seconds : 0};
    // A run that cannot go on (the two checks below) stops here, before the save: the
    // checkpoint keeps its last good epoch.
    require_finite(o, *model, epoch, s.train_loss);
    // float16 holds at most 65504: once the weights are large enough for the forward to
    // overflow, every step's gradients are inf and the scaler skips them all. Lowering the
    // scale cannot help a forward that overflows, so such a run is stuck for good.
    ENGINE_REQUIRE(
        stepped > 0 || trained == 0, "[train] no step of epoch ", epoch, " was taken: the GradScaler skipped all ",
        batches, " steps, because every step's gradients held inf or NaN (its scale fell to ", scaler.get_scale(),
        "), so the weights no longer change. Under --autocast fp16 this happens when the float16 forward "
        "overflows (float16 holds at most 65504). ",
        nothing_saved(o), "Try a smaller learning rate (this run's peak is ", o.lr, "), or --autocast bf16.");
    if (!o.checkpoint.empty())
      save(o, *model, *opt, scaler, generator_state(sampler->generator()), {epoch, 0, 0}, train_set->size());
    on_epoch(s);
  }
  return model;
}

}  // namespace fmnist
