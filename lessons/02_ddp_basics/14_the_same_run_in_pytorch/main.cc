// Lesson 2, step 14: the same run in PyTorch. This program puts the two runs side by side:
// it reads every rank's per-step losses from the engine's run (13_recap --twin) and from
// its PyTorch twin (torch_twin.py), prints how far apart they are, and draws both loss
// curves and, below them, their relative difference on a log scale, with the difference
// of one step taken from the engine's own state at a few steps (one_step_rank0.txt). With
// --pytorch-again DIR (PyTorch's run once more, with its sums in another order) it also
// shows how far PyTorch drifts from itself: the yardstick for the engine's drift.
//
//   compare_runs OURS_DIR TORCH_DIR PICTURE.png TITLE [--pytorch-again TORCH2_DIR]
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "lessons/common/plot.h"
#include "tools/flags/flags.h"

namespace {
std::vector<double> read_losses(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::vector<double> v;
  for (double x; in >> x;) v.push_back(x);
  return v;
}

double relative(double a, double b) { return std::fabs(a - b) / std::max(std::fabs(b), 1e-30); }

// log10 of a relative difference, for the lower chart; equal values are shown at -12.
double log_difference(double a, double b) { return std::log10(std::max(relative(a, b), 1e-12)); }

// The largest relative difference of two runs' per-step losses within their first `first` steps.
double worst_within(const std::vector<double>& a, const std::vector<double>& b, size_t first) {
  double worst = 0;
  for (size_t s = 0; s < std::min({a.size(), b.size(), first}); ++s) worst = std::max(worst, relative(a[s], b[s]));
  return worst;
}

// "1.08e-07 in the first 10 steps, 4.73e-07 in the first 50, 6.40e-07 in the first 100, 6.40e-07 in all"
std::string worst_words(const double worst[4]) {
  char line[160];
  std::snprintf(line, sizeof line,
                "%.2e in the first 10 steps, %.2e in the first 50, %.2e in the first 100, %.2e in all", worst[0],
                worst[1], worst[2], worst[3]);
  return line;
}

constexpr size_t kWithin[4] = {10, 50, 100, SIZE_MAX};

// A folder's own name: "pytorch-avx2" for "out/mlp-x2/pytorch-avx2/".
std::string last_name(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir.substr(dir.find_last_of('/') + 1);
}

// torch_twin.py's "step loss" lines: PyTorch's loss of one step from the engine's state.
std::vector<std::pair<size_t, double>> read_one_step(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::pair<size_t, double>> v;
  size_t step;
  for (double loss; in >> step >> loss;) v.push_back({step, loss});
  return v;
}
}  // namespace

int main(int argc, char** argv) try {
  std::string ours_dir, torch_dir, picture, title, again_dir;
  engine::Flags flags("compare_runs", "The engine's run and its PyTorch twin, step by step.");
  flags.add_positional("OURS_DIR", &ours_dir, "the folder 13_recap --twin wrote");
  flags.add_positional("TORCH_DIR", &torch_dir, "the folder torch_twin.py wrote");
  flags.add_positional("PICTURE", &picture, "the PNG to draw");
  flags.add_positional("TITLE", &title, "its title");
  flags.add("--pytorch-again", &again_dir, "the folder of PyTorch's run once more, its sums in another order");
  flags.parse_or_exit(argc, argv);

  double worst[4] = {}, again[4] = {};  // engine against PyTorch; PyTorch against itself
  size_t steps = 0;
  int ranks = 0;
  lessons::LineChart losses{title + ": loss per step, rank 0", "step", "loss", {}};
  lessons::LineChart diff{"relative difference of the losses |a - b| / |b|, rank 0 (log10)", "step", "log10", {}};
  for (int r = 0; std::ifstream(ours_dir + "/losses_rank" + std::to_string(r) + ".txt").good(); ++r, ++ranks) {
    const auto a = read_losses(ours_dir + "/losses_rank" + std::to_string(r) + ".txt");
    const auto b = read_losses(torch_dir + "/losses_rank" + std::to_string(r) + ".txt");
    if (a.size() != b.size() || a.empty())
      throw std::runtime_error("rank " + std::to_string(r) + ": " + std::to_string(a.size()) + " steps here, " +
                               std::to_string(b.size()) + " in PyTorch");
    steps = a.size();
    for (int i = 0; i < 4; ++i) worst[i] = std::max(worst[i], worst_within(a, b, kWithin[i]));
    std::vector<double> c;  // PyTorch once more (--pytorch-again), against PyTorch: the yardstick
    if (!again_dir.empty()) {
      c = read_losses(again_dir + "/losses_rank" + std::to_string(r) + ".txt");
      if (c.size() != b.size())
        throw std::runtime_error("rank " + std::to_string(r) + ": " + std::to_string(c.size()) + " steps in " +
                                 again_dir + ", " + std::to_string(b.size()) + " in " + torch_dir);
      for (int i = 0; i < 4; ++i) again[i] = std::max(again[i], worst_within(c, b, kWithin[i]));
    }
    if (r != 0) continue;
    lessons::Series e{"engine", lessons::kBlue, {}}, t{"pytorch", lessons::kOrange, {}},
        d{"engine vs pytorch", lessons::kRed, {}};
    for (size_t s = 0; s < a.size(); ++s) {
      e.points.push_back({double(s + 1), a[s]});
      t.points.push_back({double(s + 1), b[s]});
      d.points.push_back({double(s + 1), log_difference(a[s], b[s])});
    }
    lessons::Series p{"pytorch vs " + last_name(again_dir), lessons::kPurple, {}};
    for (size_t s = 0; s < c.size(); ++s) p.points.push_back({double(s + 1), log_difference(c[s], b[s])});
    lessons::Series one{"one step, same state", lessons::kGreen, {}};
    for (const auto& [step, loss] : read_one_step(torch_dir + "/one_step_rank0.txt")) {
      if (step >= a.size()) throw std::runtime_error("one_step_rank0.txt names step " + std::to_string(step));
      one.points.push_back({double(step + 1), log_difference(a[step], loss)});
    }
    losses.series = {e, t};
    diff.series = {d};
    if (!p.points.empty()) diff.series.push_back(p);
    if (!one.points.empty()) diff.series.push_back(one);
  }
  if (ranks == 0) throw std::runtime_error("no losses_rank0.txt in " + ours_dir);
  diff.y_lo = -12, diff.y_hi = 0;
  lessons::Canvas canvas(losses.width, losses.height + diff.height);
  canvas.paste(losses.draw(), 0, 0);
  canvas.paste(diff.draw(), 0, losses.height);
  canvas.save_png(picture);
  std::printf("%d rank(s), %zu steps each: largest relative loss difference %s\n", ranks, steps,
              worst_words(worst).c_str());
  if (!again_dir.empty())
    std::printf("PyTorch against itself (%s): largest relative loss difference %s\n", last_name(again_dir).c_str(),
                worst_words(again).c_str());
  std::printf("picture: %s\n", picture.c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "compare_runs: %s\n", e.what());
  return 1;
}
