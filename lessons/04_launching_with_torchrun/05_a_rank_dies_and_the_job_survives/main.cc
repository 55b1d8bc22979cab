// Lesson 4, step 5: a rank dies and the job survives. This program is the step's judge: it
// compares two checkpoints tensor by tensor, bit by bit. survive.sh trains the recap twice,
// once straight through and once with a rank killed (kill -9) in the middle and the job
// restarted by `launch --max_restarts=1`, then asks this program whether the two ended with
// the same weights.
//
//   same_weights straight.safetensors resumed.safetensors
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "nn/safetensors.h"
#include "tools/flags/flags.h"

using namespace engine;

int main(int argc, char** argv) try {
  std::string a_path, b_path;
  Flags flags("same_weights", "Compares two checkpoints bit by bit.");
  flags.add_positional("A", &a_path, "a checkpoint (safetensors)");
  flags.add_positional("B", &b_path, "another");
  flags.parse_or_exit(argc, argv);
  const nn::StateDict a = nn::load_safetensors(a_path), b = nn::load_safetensors(b_path);
  int64_t values = 0, differ = 0;
  double worst = 0;
  for (const auto& [name, t] : a) {
    const auto it = b.find(name);
    if (it == b.end() || it->second.shape() != t.shape() || it->second.dtype() != t.dtype()) {
      std::printf("%s: present in %s but not alike in %s\n", name.c_str(), a_path.c_str(), b_path.c_str());
      return 1;
    }
    const std::vector<float> x = t.to_vector<float>(), y = it->second.to_vector<float>();
    for (size_t i = 0; i < x.size(); ++i) {
      differ += std::memcmp(&x[i], &y[i], sizeof(float)) != 0;
      worst = std::max(worst, double(std::fabs(x[i] - y[i])));
    }
    values += int64_t(x.size());
  }
  if (a.size() != b.size()) std::printf("the checkpoints hold %zu and %zu tensors\n", a.size(), b.size());
  if (differ == 0 && a.size() == b.size()) {
    std::printf("bit-identical: %zu tensors, %lld values, not one bit differs\n", a.size(), (long long)values);
    return 0;
  }
  std::printf("different: %lld of %lld values differ, the largest by %g\n", (long long)differ, (long long)values,
              worst);
  return 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "same_weights: %s\n", e.what());
  return 1;
}
