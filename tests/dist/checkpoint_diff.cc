// Compares two checkpoints tensor by tensor: the same names and shapes, and each tensor's
// relative distance ||a - b|| / ||b|| within a tolerance. For tests that train the same
// run two ways (across machines and on one) and expect the same weights up to the order
// in which sums were added.
//
//   checkpoint_diff a.safetensors b.safetensors 1e-5   # exit 0 if every tensor is within
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "nn/safetensors.h"
#include "tensor/ops.h"

using namespace engine;

int main(int argc, char** argv) try {
  if (argc != 4) {
    std::fprintf(stderr, "usage: checkpoint_diff A.safetensors B.safetensors TOLERANCE\n");
    return 2;
  }
  char* end = nullptr;
  const double tolerance = std::strtod(argv[3], &end);
  if (*end != '\0' || !(tolerance >= 0 && tolerance < 1)) {
    std::fprintf(stderr, "checkpoint_diff: TOLERANCE must be a number in [0, 1), got '%s'\n", argv[3]);
    return 2;
  }
  const nn::StateDict a = nn::load_safetensors(argv[1]), b = nn::load_safetensors(argv[2]);
  if (a.size() != b.size()) {
    std::printf("checkpoint_diff: %zu tensors in %s, %zu in %s\n", a.size(), argv[1], b.size(), argv[2]);
    return 1;
  }
  double worst = 0;
  std::string worst_name;
  for (const auto& [name, ta] : a) {
    const auto it = b.find(name);
    if (it == b.end() || it->second.shape() != ta.shape()) {
      std::printf("checkpoint_diff: %s is %s in %s but %s in %s\n", name.c_str(), shape_str(ta.shape()).c_str(),
                  argv[1], it == b.end() ? "missing" : shape_str(it->second.shape()).c_str(), argv[2]);
      return 1;
    }
    const Tensor x = ta.to(DType::Float32), y = it->second.to(DType::Float32), d = x - y;
    const double norm = std::sqrt(sum(y * y).item()), dist = std::sqrt(sum(d * d).item());
    const double rel = norm > 0 ? dist / norm : dist;
    if (!(rel <= worst) || worst_name.empty()) worst = rel, worst_name = name;  // NaN counts as worst
  }
  const bool ok = worst <= tolerance;
  std::printf("checkpoint_diff: %zu tensors; largest relative distance %.3g (%s); tolerance %.3g: %s\n", a.size(),
              worst, worst_name.c_str(), tolerance, ok ? "same" : "DIFFERENT");
  return ok ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "checkpoint_diff: %s\n", e.what());
  return 2;
}
