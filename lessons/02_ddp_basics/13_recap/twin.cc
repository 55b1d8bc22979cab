#include "lessons/02_ddp_basics/13_recap/twin.h"

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
}

void TwinRecorder::start(engine::nn::Module& model, const Settings& s, int64_t train_size, int64_t steps_per_epoch) {
  if (!on() || rank_ != 0) return;
  engine::nn::save_safetensors(dir_ + "/init.safetensors", model.state_dict());
  char json[512];
  std::snprintf(json, sizeof json,
                "{\"model\": \"%s\", \"epochs\": %d, \"batch\": %lld, \"lr\": %.17g, \"momentum\": 0.9, "
                "\"world\": %d, \"train_limit\": %lld, \"steps_per_epoch\": %lld, \"mean\": %.9g, \"std\": %.9g}\n",
                s.model.c_str(), s.epochs, (long long)s.batch, s.lr, world_, (long long)train_size,
                (long long)steps_per_epoch, double(engine::data::kFashionMnistMean),
                double(engine::data::kFashionMnistStd));
  std::ofstream(dir_ + "/run.json") << json;
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
  ENGINE_REQUIRE(order.good() && losses.good(), "[twin] writing into ", dir_, " failed");
  if (rank_ == 0) engine::nn::save_safetensors(dir_ + "/final.safetensors", model.state_dict());
}

}  // namespace recap
