#include "lessons/common/curves.h"

#include <fstream>
#include <sstream>

#include "tensor/check.h"

namespace lessons {

void write_curves_csv(const std::string& path, const std::vector<EpochPoint>& points) {
  std::ofstream f(path);
  f << "epoch,loss,test_accuracy_percent\n";
  f.precision(6);
  for (const auto& p : points) f << p.epoch << ',' << p.loss << ',' << p.accuracy << '\n';
  f.close();
  ENGINE_REQUIRE(f.good(), "[write_curves_csv] cannot write ", path);
}

std::vector<EpochPoint> read_curves_csv(const std::string& path) {
  std::ifstream f(path);
  ENGINE_REQUIRE(f.good(), "[read_curves_csv] cannot open ", path);
  std::string line;
  std::getline(f, line);
  ENGINE_REQUIRE(line == "epoch,loss,test_accuracy_percent", "[read_curves_csv] ", path, ": unexpected header \"", line,
                 "\"");
  std::vector<EpochPoint> points;
  for (int n = 2; std::getline(f, line); ++n) {
    std::istringstream s(line);
    EpochPoint p;
    char c1 = 0, c2 = 0;
    ENGINE_REQUIRE(s >> p.epoch >> c1 >> p.loss >> c2 >> p.accuracy && c1 == ',' && c2 == ',', "[read_curves_csv] ",
                   path, " line ", n, ": expected epoch,loss,accuracy, got \"", line, "\"");
    points.push_back(p);
  }
  return points;
}

CurvesLayout curves_layout(const std::vector<CurveRun>& runs, const std::string& title) {
  CurvesLayout l;
  l.loss = {title + ": training loss", "epoch", "loss", {}};
  l.accuracy = {title + ": test accuracy", "epoch", "accuracy (%)", {}};
  for (size_t k = 0; k < runs.size(); ++k) {
    // One run: blue loss, orange accuracy, as before; several: one colour per run on both.
    const Color loss_color = runs.size() == 1 ? kBlue : palette()[k % palette().size()];
    const Color acc_color = runs.size() == 1 ? kOrange : loss_color;
    Series loss{runs.size() == 1 ? "train loss" : runs[k].name, loss_color, {}};
    Series acc{runs.size() == 1 ? "test accuracy" : runs[k].name, acc_color, {}};
    for (const auto& p : runs[k].points) {
      loss.points.push_back({p.epoch, p.loss});
      acc.points.push_back({p.epoch, p.accuracy});
    }
    l.loss.series.push_back(loss);
    l.accuracy.series.push_back(acc);
  }
  l.loss.width = l.accuracy.width = 640;
  l.loss.height = l.accuracy.height = 420;
  l.accuracy_x = 640;
  l.width = 1280;
  l.height = 420;
  return l;
}

void save_curves_png(const std::string& path, const std::vector<CurveRun>& runs, const std::string& title) {
  const CurvesLayout l = curves_layout(runs, title);
  Canvas c(l.width, l.height);
  c.paste(l.loss.draw(), 0, 0);
  c.paste(l.accuracy.draw(), l.accuracy_x, 0);
  c.save_png(path);
}

std::string check_curves_png(const std::string& png_path, const std::vector<std::pair<std::string, std::string>>& runs,
                             const std::string& title) {
  std::vector<CurveRun> read;
  for (const auto& [name, csv] : runs) read.push_back({name, read_curves_csv(csv)});
  const CurvesLayout l = curves_layout(read, title);
  const std::string problem = check_chart_png(png_path, l.loss, 0, 0, l.width, l.height);
  return problem.empty() ? check_chart_png(png_path, l.accuracy, l.accuracy_x, 0, l.width, l.height) : problem;
}

}  // namespace lessons
