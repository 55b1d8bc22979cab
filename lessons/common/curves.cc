#include "lessons/common/curves.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "tensor/check.h"

namespace lessons {

// A number as the CSV holds it: 6 significant digits, and "nan", "inf" or "-inf" for the
// values a diverged run leaves (printf would write "-nan" for a NaN with its sign bit set).
static std::string csv_number(double v) {
  if (std::isnan(v)) return "nan";
  char b[32];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

void write_curves_csv(const std::string& path, const std::vector<EpochPoint>& points) {
  std::ofstream f(path);
  f << "epoch,loss,test_accuracy_percent\n";
  for (const auto& p : points) f << p.epoch << ',' << csv_number(p.loss) << ',' << csv_number(p.accuracy) << '\n';
  f.close();
  ENGINE_REQUIRE(f.good(), "[write_curves_csv] cannot write ", path);
}

// One field of a line: the whole of it must be a number (strtod also reads nan and inf).
static bool parse_field(const std::string& field, double& out) {
  if (field.empty() || std::isspace(static_cast<unsigned char>(field[0]))) return false;
  char* end = nullptr;
  out = std::strtod(field.c_str(), &end);
  return end == field.c_str() + field.size();
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
    std::vector<std::string> fields(1);
    for (char ch : line)
      if (ch == ',')
        fields.emplace_back();
      else
        fields.back().push_back(ch);
    double epoch = 0;
    EpochPoint p;
    const bool ok = fields.size() == 3 && parse_field(fields[0], epoch) && epoch >= 0 && epoch <= 1e9 &&
                    epoch == std::floor(epoch) && parse_field(fields[1], p.loss) && parse_field(fields[2], p.accuracy);
    ENGINE_REQUIRE(ok, "[read_curves_csv] ", path, " line ", n, ": expected epoch,loss,accuracy, got \"", line, "\"");
    p.epoch = int(epoch);
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
