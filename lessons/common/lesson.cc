#include "lessons/common/lesson.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "nlohmann/json.hpp"
#include "tensor/check.h"
#include "tensor/ops.h"

namespace lessons {

using namespace engine;
using namespace engine::nn;

std::string output_dir(const std::string& name) {
  std::string dir;
  if (const char* o = std::getenv("LESSON_OUT"); o && *o)
    dir = o;
  else if (const char* w = std::getenv("BUILD_WORKSPACE_DIRECTORY"); w && *w)
    dir = std::string(w) + "/out/" + name;
  else
    dir = "out/" + name;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  ENGINE_REQUIRE(!ec, "[output_dir] cannot create ", dir,
                 " (the lesson's output folder; LESSON_OUT sets it): ", ec.message());
  return dir;
}

namespace {
void append_result(const std::string& key, const nlohmann::json& value) {
  const char* file = std::getenv("LESSON_RESULTS");
  if (!file || !*file) return;
  const char* rank = std::getenv("RANK");
  nlohmann::json row = {{"rank", rank ? std::atoi(rank) : 0}, {"key", key}, {"value", value}};
  const std::string line = row.dump() + "\n";
  const std::string path = file;
  // One write of one short line with O_APPEND: the ranks' lines never interleave.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  ENGINE_REQUIRE(fd >= 0, "[report] cannot open LESSON_RESULTS=", path, ": ", std::strerror(errno));
  const bool ok = ::write(fd, line.data(), line.size()) == ssize_t(line.size());
  ::close(fd);
  ENGINE_REQUIRE(ok, "[report] cannot write LESSON_RESULTS=", path);
}
}  // namespace

void report(const std::string& key, double value) { append_result(key, value); }
void report(const std::string& key, const std::string& value) { append_result(key, value); }

std::string fingerprint(Module& model) {
  uint64_t h = 1469598103934665603ull;
  for (auto& p : model.parameters()) {
    const Tensor t = p.data().contiguous();
    const auto* b = reinterpret_cast<const unsigned char*>(t.bytes());
    for (size_t i = 0; i < t.nbytes(); ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
  char s[17];
  std::snprintf(s, sizeof s, "%016llx", (unsigned long long)h);
  return s;
}

std::shared_ptr<Sequential> toy_mlp(uint64_t seed) {
  Generator g(seed);
  return std::make_shared<Sequential>(
      std::vector<ModulePtr>{std::make_shared<Linear>(784, 256, true, &g), std::make_shared<ReLU>(),
                             std::make_shared<Linear>(256, 256, true, &g), std::make_shared<ReLU>(),
                             std::make_shared<Linear>(256, 10, true, &g)});
}

void toy_batch(int step, int64_t batch, uint64_t seed, Tensor* x, Tensor* y) {
  Generator g(seed * 1000003 + uint64_t(step));
  *x = randn({batch, 784}, &g);
  *y = argmax(sum(x->narrow(1, 0, 780).reshape({batch, 10, 78}), {2}), 1);
}

std::string numbers(const std::vector<double>& values) {
  std::string s;
  char buf[32];
  for (double v : values) {
    std::snprintf(buf, sizeof buf, "%.17g", v);
    s += (s.empty() ? "" : " ") + std::string(buf);
  }
  return s;
}

std::string join(const std::vector<int64_t>& values) {
  std::string s;
  for (int64_t v : values) s += (s.empty() ? "" : " ") + std::to_string(v);
  return s;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  ENGINE_REQUIRE(a.shape() == b.shape(), "[max_abs_diff] shapes differ");
  return max(abs(sub(a, b))).item();
}

static const Tensor& values(const Variable& p, bool grads) { return grads ? p.grad() : p.data(); }

double max_difference(Module& a, Module& b, bool grads) {
  const auto pa = a.parameters(), pb = b.parameters();
  ENGINE_REQUIRE(pa.size() == pb.size(), "[max_difference] the models have ", pa.size(), " and ", pb.size(),
                 " parameters");
  double diff = 0;
  for (size_t i = 0; i < pa.size(); ++i)
    diff = std::max(diff, max_abs_diff(values(pa[i], grads), values(pb[i], grads)));
  return diff;
}

double relative_difference(Module& a, Module& b, bool grads) {
  double scale = 0;
  for (const auto& p : b.parameters()) scale = std::max(scale, max(abs(values(p, grads))).item());
  return max_difference(a, b, grads) / scale;
}

}  // namespace lessons
