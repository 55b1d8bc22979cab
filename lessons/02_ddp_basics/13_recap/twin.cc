#include "lessons/02_ddp_basics/13_recap/twin.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "data/fashion_mnist.h"
#include "nn/safetensors.h"
#include "tensor/check.h"

namespace recap {

TwinRecorder::TwinRecorder(std::string dir, int rank, int world) : dir_(std::move(dir)), rank_(rank), world_(world) {
  if (!on()) return;
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  ENGINE_REQUIRE(!ec, "[twin] cannot create ", dir_, ": ", ec.message());
  // An earlier run into this folder with more ranks left files for ranks this one does not
  // have; the comparison counts ranks by their files, so rank 0 removes those.
  if (rank_ != 0) return;
  for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    for (const char* prefix : {"losses_rank", "order_rank"}) {
      const std::string p = prefix;
      if (name.rfind(p, 0) != 0 || name.size() <= p.size() + 4 || name.substr(name.size() - 4) != ".txt") continue;
      const std::string digits = name.substr(p.size(), name.size() - p.size() - 4);
      if (digits.find_first_not_of("0123456789") == std::string::npos && digits.size() < 9 &&
          std::stoi(digits) >= world_)
        std::filesystem::remove(entry.path(), ec);
    }
  }
}

namespace {
// Four steps spread over the run, the last one included, none the first (whose momentum
// buffers do not exist yet): where the two runs' free-running losses have drifted apart.
std::vector<int64_t> probe_steps(int64_t total) {
  std::vector<int64_t> steps;
  for (int64_t q = 1; q <= 4; ++q) {
    const int64_t step = q * total / 4 - (q == 4 ? 1 : 0);
    if (step > 0 && (steps.empty() || step > steps.back())) steps.push_back(step);
  }
  return steps;
}
}  // namespace

void TwinRecorder::start(engine::nn::Module& model, const Settings& s, int64_t train_size, int64_t steps_per_epoch) {
  if (!on() || rank_ != 0) return;
  probe_steps_ = probe_steps(s.epochs * steps_per_epoch);
  std::string probes;
  for (int64_t step : probe_steps_) probes += (probes.empty() ? "" : ", ") + std::to_string(step);
  engine::nn::save_safetensors(dir_ + "/init.safetensors", model.state_dict());
  char json[512];
  std::snprintf(json, sizeof json,
                "{\"model\": \"%s\", \"epochs\": %d, \"batch\": %lld, \"lr\": %.17g, \"momentum\": 0.9, "
                "\"world\": %d, \"train_limit\": %lld, \"steps_per_epoch\": %lld, \"mean\": %.9g, \"std\": %.9g, "
                "\"probe_steps\": [%s]}\n",
                s.model.c_str(), s.epochs, (long long)s.batch, s.lr, world_, (long long)train_size,
                (long long)steps_per_epoch, double(engine::data::kFashionMnistMean),
                double(engine::data::kFashionMnistStd), probes.c_str());
  std::ofstream run(dir_ + "/run.json");
  run << json;
  run.close();  // a full disk shows at the flush
  ENGINE_REQUIRE(run.good(), "[twin] cannot write ", dir_, "/run.json");
}

void TwinRecorder::before_step(int64_t step, const engine::nn::Module& model, const engine::nn::Optimizer& opt) {
  if (!on() || rank_ != 0 || std::find(probe_steps_.begin(), probe_steps_.end(), step) == probe_steps_.end()) return;
  before_.clear();
  for (const auto& [name, t] : model.state_dict()) before_["before." + name] = t.clone();
  for (const auto& [name, t] : opt.state_dict())
    if (name.rfind("state.", 0) == 0) before_["optimizer." + name] = t.clone();
}

void TwinRecorder::after_step(int64_t step, const engine::nn::Module& model) {
  if (before_.empty()) return;
  for (const auto& [name, t] : model.state_dict()) before_["after." + name] = t;
  engine::nn::save_safetensors(dir_ + "/probe_step" + std::to_string(step) + ".safetensors", before_);
  before_.clear();
}

void TwinRecorder::epoch_order(const std::vector<int64_t>& indices) {
  if (on()) orders_.push_back(indices);
}

void TwinRecorder::finish(engine::nn::Module& model) {
  if (!on()) return;
  std::ofstream order(dir_ + "/order_rank" + std::to_string(rank_) + ".txt");
  for (const auto& epoch : orders_) {
    for (size_t i = 0; i < epoch.size(); ++i) order << (i ? " " : "") << epoch[i];
    order << "\n";
  }
  std::ofstream losses(dir_ + "/losses_rank" + std::to_string(rank_) + ".txt");
  char buf[32];
  for (double l : losses_) {
    std::snprintf(buf, sizeof buf, "%.9g\n", l);  // every digit of the float32 loss
    losses << buf;
  }
  order.close(), losses.close();  // a full disk shows at the flush
  ENGINE_REQUIRE(order.good() && losses.good(), "[twin] writing into ", dir_, " failed");
  if (rank_ == 0) engine::nn::save_safetensors(dir_ + "/final.safetensors", model.state_dict());
}

}  // namespace recap
