#include "lessons/02_ddp_basics/13_recap/training_state.h"

#include <cstdio>
#include <cstring>
#include <sstream>

#include "dist/dist.h"
#include "dist/same_model.h"
#include "tensor/check.h"
#include "tensor/ops.h"
#include "tensor/parse.h"

namespace recap {

using engine::Error;
using engine::nn::Metadata;
using engine::nn::StateDict;

namespace {

std::string exact(double x) {  // 17 digits: a double survives the round trip to text
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

// "1:0.53:83.0;2:0.37:85.3": epoch:loss:accuracy of each finished epoch.
std::string encode_curves(const std::vector<::lessons::EpochPoint>& curves) {
  std::string s;
  for (const auto& p : curves)
    s += (s.empty() ? "" : ";") + std::to_string(p.epoch) + ":" + exact(p.loss) + ":" + exact(p.accuracy);
  return s;
}

std::vector<::lessons::EpochPoint> decode_curves(const std::string& s, const std::string& what) {
  std::vector<::lessons::EpochPoint> out;
  std::stringstream items(s);
  for (std::string item; std::getline(items, item, ';');) {
    const size_t a = item.find(':'), b = item.find(':', a + 1);
    ENGINE_REQUIRE(a != std::string::npos && b != std::string::npos, what, ": malformed entry \"", item, "\"");
    out.push_back({int(engine::parse_int(item.substr(0, a), what, 1, 1000000)),
                   engine::parse_double(item.substr(a + 1, b - a - 1), what, -1e30, 1e30),
                   engine::parse_double(item.substr(b + 1), what, 0, 100)});
  }
  return out;
}

}  // namespace

std::vector<double> gather_loss_sums(double mine, engine::Device device) {
  int64_t bits;  // the double's own bits: the tensors hold float32 or int64
  std::memcpy(&bits, &mine, sizeof bits);
  std::vector<engine::Tensor> gathered;  // on the group's device, as nccl needs (torch.tensor(..., device=device))
  engine::dist::all_gather(gathered, engine::from_vector(std::vector<int64_t>{bits}).to(device));
  std::vector<double> sums(gathered.size());
  for (size_t r = 0; r < sums.size(); ++r) {
    const int64_t b = gathered[r].to(engine::Device::cpu()).to_vector<int64_t>()[0];
    std::memcpy(&sums[r], &b, sizeof b);
  }
  return sums;
}

std::string settings_text(const Settings& s) {
  std::ostringstream shown;
  shown << "model " << s.model << ", epochs " << s.epochs << ", batch " << s.batch << ", train-limit " << s.train_limit
        << ", lr " << s.lr << ", warmup-epochs " << s.warmup_epochs;
  return shown.str();
}

void require_same_settings(const Settings& s) {
  const std::string text = settings_text(s);  // for people; the hash takes every digit
  uint64_t hash = 1469598103934665603ull;     // FNV-1a
  for (unsigned char c : text + exact(s.lr) + exact(s.warmup_epochs)) hash = (hash ^ c) * 1099511628211ull;
  int64_t mine;
  std::memcpy(&mine, &hash, sizeof mine);
  ENGINE_REQUIRE(engine::dist::same_on_every_rank(engine::dist::default_group(), {mine}),
                 "[recap] the ranks were started with different settings; rank ", engine::dist::get_rank(), " has ",
                 text, ". Start every rank (every machine) with the same flags");
}

void require_same_start(const TrainingState& state, bool resumed, const std::string& path) {
  const int rank = engine::dist::get_rank();
  std::ostringstream mine;
  if (resumed)
    mine << "resumed from " << path << " at epoch " << state.epoch + 1 << ", after batch " << state.batch << " (step "
         << state.step << ")";
  else
    mine << "found no training state at " << path << " and starts afresh";
  ENGINE_REQUIRE(engine::dist::same_on_every_rank(engine::dist::default_group(),
                                                  {resumed ? 1 : 0, state.epoch, state.batch, state.step}),
                 "[resume] the ranks do not start from the same point: rank ", rank, " ", mine.str(),
                 ", another does not. Every rank must read the same training state: on several machines, keep it "
                 "on a filesystem they share (--state) or copy it to each before restarting");
}

void save_training_state(const std::string& path, const TrainingState& s, const std::vector<double>& loss_sums,
                         const StateDict& model, const StateDict& optimizer, const Settings& settings) {
  const int world_size = int(loss_sums.size());
  StateDict all;
  // Each rank's loss sum, bit for bit (a double as int64 bits: the tensors hold float32 or int64).
  std::vector<int64_t> bits(loss_sums.size());
  std::memcpy(bits.data(), loss_sums.data(), bits.size() * sizeof(double));
  all["loss_sums"] = engine::from_vector(bits);
  for (const auto& [k, t] : model) all["model." + k] = t;
  for (const auto& [k, t] : optimizer) all["optimizer." + k] = t;
  const Metadata manifest = {{"format", "recap-training-state-1"},
                             {"world_size", std::to_string(world_size)},
                             {"epoch", std::to_string(s.epoch)},
                             {"batch", std::to_string(s.batch)},
                             {"step", std::to_string(s.step)},
                             {"curves", encode_curves(s.curves)},
                             {"model", settings.model},
                             {"epochs", std::to_string(settings.epochs)},
                             {"batch_size", std::to_string(settings.batch)},
                             {"train_limit", std::to_string(settings.train_limit)},
                             {"lr", exact(settings.lr)},
                             {"warmup_epochs", exact(settings.warmup_epochs)}};
  engine::nn::save_safetensors(path, all, manifest);  // atomic: a temporary, then a rename
}

TrainingState load_training_state(const std::string& path, const Settings& settings, int world_size, int rank) {
  Metadata m;
  const StateDict all = engine::nn::load_safetensors(path, &m);
  const std::string where = "[resume] " + path;
  auto key = [&](const char* k) -> const std::string& {
    ENGINE_REQUIRE(m.count(k), where, " has no \"", k,
                   "\" in its metadata: not a training state written by this program");
    return m.at(k);
  };
  auto number = [&](const char* k, int64_t lo, int64_t hi) {
    return engine::parse_int(key(k), where + ": " + k, lo, hi);
  };
  ENGINE_REQUIRE(key("format") == "recap-training-state-1", where, " has format \"", key("format"), "\"");
  // The same run, or the resumed one would not end where the uninterrupted one does.
  auto same = [&](const char* k, const std::string& mine) {
    ENGINE_REQUIRE(key(k) == mine, where, " was saved with ", k, " ", key(k), ", but this run has ", mine,
                   ": resume with the same settings, or start afresh without --resume");
  };
  same("model", settings.model);
  same("epochs", std::to_string(settings.epochs));
  same("batch_size", std::to_string(settings.batch));
  same("train_limit", std::to_string(settings.train_limit));
  same("lr", exact(settings.lr));
  same("warmup_epochs", exact(settings.warmup_epochs));
  TrainingState s;
  s.epoch = int(number("epoch", 0, settings.epochs));
  s.batch = number("batch", 0, int64_t(1) << 40);
  s.step = number("step", 0, int64_t(1) << 50);
  s.curves = decode_curves(key("curves"), where + ": curves");
  const int64_t saved_world = number("world_size", 1, 1 << 20);
  auto ranks = [](int64_t n) { return std::to_string(n) + (n == 1 ? " rank" : " ranks"); };
  ENGINE_REQUIRE(saved_world == world_size || s.batch == 0, where, " was saved by ", ranks(saved_world),
                 " in the middle of epoch ", s.epoch + 1, " (after batch ", s.batch, "): with ", ranks(world_size),
                 " each rank's slice of the data differs, so the rest of the epoch cannot be matched; resume "
                 "with WORLD_SIZE=",
                 saved_world, ", or from a state saved at the end of an epoch");
  if (s.batch > 0) {  // mid-epoch, so the same world size: this rank's own sum
    const auto it = all.find("loss_sums");
    ENGINE_REQUIRE(it != all.end() && it->second.dtype() == engine::DType::Int64 && it->second.numel() == saved_world,
                   where, ": \"loss_sums\" should hold ", saved_world, " int64 values");
    const int64_t b = it->second.to_vector<int64_t>()[size_t(rank)];
    std::memcpy(&s.loss_sum, &b, sizeof b);
  }
  for (const auto& [k, t] : all) {
    if (k.rfind("model.", 0) == 0)
      s.model[k.substr(6)] = t;
    else if (k.rfind("optimizer.", 0) == 0)
      s.optimizer[k.substr(10)] = t;
  }
  return s;
}

}  // namespace recap
