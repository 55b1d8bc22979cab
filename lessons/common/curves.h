// The training curves of a run, as numbers (CSV) and as a picture (PNG): loss on the left,
// test accuracy on the right, one point per epoch; several runs share the two charts.
//
//   std::vector<EpochPoint> run = {{1, 0.54, 83.0}, {2, 0.38, 85.9}};
//   write_curves_csv(dir + "/curves.csv", run);
//   save_curves_png(dir + "/curves.png", {{"DDP x2", run}, {"1 process", alone}}, "Fashion-MNIST");
//
// check_curves_png (and the chart_check program around it) checks that a picture
// shows exactly the numbers: every point's dot, in its series' colour, where it belongs.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "lessons/common/plot.h"

namespace lessons {

struct EpochPoint {
  int epoch = 0;
  double loss = 0, accuracy = 0;  // accuracy in percent
};

void write_curves_csv(const std::string& path, const std::vector<EpochPoint>& points);
std::vector<EpochPoint> read_curves_csv(const std::string& path);  // throws naming the file and line

// One run's curves and the name its lines carry in the legend.
struct CurveRun {
  std::string name;
  std::vector<EpochPoint> points;
};

// The two charts, and where the right one sits in the picture.
struct CurvesLayout {
  LineChart loss, accuracy;
  int accuracy_x = 0, width = 0, height = 0;
};
CurvesLayout curves_layout(const std::vector<CurveRun>& runs, const std::string& title);
void save_curves_png(const std::string& path, const std::vector<CurveRun>& runs, const std::string& title);

// "" when the picture at png_path is the right size and, at every point of every run's
// CSV, shows the dot of its run's colour (or of a run drawn after it, over it); otherwise
// what is wrong, naming the run and the point. runs: (name, CSV path) in drawing order.
std::string check_curves_png(const std::string& png_path, const std::vector<std::pair<std::string, std::string>>& runs,
                             const std::string& title);

}  // namespace lessons
