// Lesson 2, step 14: the same run in PyTorch. This program puts the two runs side by side:
// it reads every rank's per-step losses from the engine's run (13_recap --twin) and from
// its PyTorch twin (torch_twin.py), prints how far apart they are, and draws both loss
// curves and, below them, their relative difference on a log scale, with the difference
// of one step taken from the engine's own state at a few steps (one_step_rank0.txt).
//
//   compare_runs OURS_DIR TORCH_DIR PICTURE.png TITLE
#include <cmath>
#include <cstdio>
#include <fstream>
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
  std::string ours_dir, torch_dir, picture, title;
  engine::Flags flags("compare_runs", "The engine's run and its PyTorch twin, step by step.");
  flags.add_positional("OURS_DIR", &ours_dir, "the folder 13_recap --twin wrote");
  flags.add_positional("TORCH_DIR", &torch_dir, "the folder torch_twin.py wrote");
  flags.add_positional("PICTURE", &picture, "the PNG to draw");
  flags.add_positional("TITLE", &title, "its title");
  flags.parse_or_exit(argc, argv);

  double worst_10 = 0, worst_50 = 0, worst_all = 0;
  size_t steps = 0;
  int ranks = 0;
  lessons::LineChart losses{title + ": loss per step, rank 0", "step", "loss", {}};
  lessons::LineChart diff{"relative difference |engine - pytorch| / pytorch, rank 0 (log10)", "step", "log10", {}};
  for (int r = 0; std::ifstream(ours_dir + "/losses_rank" + std::to_string(r) + ".txt").good(); ++r, ++ranks) {
    const auto a = read_losses(ours_dir + "/losses_rank" + std::to_string(r) + ".txt");
    const auto b = read_losses(torch_dir + "/losses_rank" + std::to_string(r) + ".txt");
    if (a.size() != b.size() || a.empty())
      throw std::runtime_error("rank " + std::to_string(r) + ": " + std::to_string(a.size()) + " steps here, " +
                               std::to_string(b.size()) + " in PyTorch");
    steps = a.size();
    for (size_t s = 0; s < a.size(); ++s) {
      const double d = relative(a[s], b[s]);
      worst_all = std::max(worst_all, d);
      if (s < 10) worst_10 = std::max(worst_10, d);
      if (s < 50) worst_50 = std::max(worst_50, d);
    }
    if (r != 0) continue;
    lessons::Series e{"engine", lessons::kBlue, {}}, t{"pytorch", lessons::kOrange, {}},
        d{"free-running", lessons::kRed, {}};
    for (size_t s = 0; s < a.size(); ++s) {
      e.points.push_back({double(s + 1), a[s]});
      t.points.push_back({double(s + 1), b[s]});
      d.points.push_back({double(s + 1), log_difference(a[s], b[s])});
    }
    lessons::Series one{"one step, same state", lessons::kGreen, {}};
    for (const auto& [step, loss] : read_one_step(torch_dir + "/one_step_rank0.txt")) {
      if (step >= a.size()) throw std::runtime_error("one_step_rank0.txt names step " + std::to_string(step));
      one.points.push_back({double(step + 1), log_difference(a[step], loss)});
    }
    losses.series = {e, t};
    diff.series = {d};
    if (!one.points.empty()) diff.series.push_back(one);
  }
  if (ranks == 0) throw std::runtime_error("no losses_rank0.txt in " + ours_dir);
  diff.y_lo = -12, diff.y_hi = 0;
  lessons::Canvas canvas(losses.width, losses.height + diff.height);
  canvas.paste(losses.draw(), 0, 0);
  canvas.paste(diff.draw(), 0, losses.height);
  canvas.save_png(picture);
  std::printf(
      "%d rank(s), %zu steps each: largest relative loss difference %.2e in the first 10 steps, %.2e in the "
      "first 50, %.2e in all\n",
      ranks, steps, worst_10, worst_50, worst_all);
  std::printf("picture: %s\n", picture.c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "compare_runs: %s\n", e.what());
  return 1;
}
