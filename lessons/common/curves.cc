#include "lessons/common/curves.h"

#include <fstream>
#include <sstream>

#include "stb/stb_image.h"
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

CurvesLayout curves_layout(const std::vector<EpochPoint>& points, const std::string& title) {
  CurvesLayout l;
  l.loss = {title + ": training loss", "epoch", "loss", {{"train loss", kBlue, {}}}};
  l.accuracy = {title + ": test accuracy", "epoch", "accuracy (%)", {{"test accuracy", kOrange, {}}}};
  for (const auto& p : points) {
    l.loss.series[0].points.push_back({p.epoch, p.loss});
    l.accuracy.series[0].points.push_back({p.epoch, p.accuracy});
  }
  l.loss.width = l.accuracy.width = 640;
  l.loss.height = l.accuracy.height = 420;
  l.accuracy_x = 640;
  l.width = 1280;
  l.height = 420;
  return l;
}

void save_curves_png(const std::string& path, const std::vector<EpochPoint>& points, const std::string& title) {
  const CurvesLayout l = curves_layout(points, title);
  Canvas c(l.width, l.height);
  c.paste(l.loss.draw(), 0, 0);
  c.paste(l.accuracy.draw(), l.accuracy_x, 0);
  c.save_png(path);
}

std::string check_curves_png(const std::string& png_path, const std::string& csv_path, const std::string& title) {
  const auto points = read_curves_csv(csv_path);
  const CurvesLayout l = curves_layout(points, title);
  int w = 0, h = 0, channels = 0;
  unsigned char* rgb = stbi_load(png_path.c_str(), &w, &h, &channels, 3);
  if (!rgb) return png_path + " is not a readable image: " + stbi_failure_reason();
  std::string problem;
  if (w != l.width || h != l.height)
    problem = png_path + " is " + std::to_string(w) + "x" + std::to_string(h) + ", expected " +
              std::to_string(l.width) + "x" + std::to_string(l.height);
  auto expect = [&](const LineChart& chart, int x0, int epoch, double y, const char* what) {
    if (!problem.empty()) return;
    const auto [px, py] = chart.to_pixel(epoch, y);
    const Color want = chart.series[0].color;
    const unsigned char* p = rgb + (size_t(py) * size_t(w) + size_t(x0 + px)) * 3;
    if (p[0] != want[0] || p[1] != want[1] || p[2] != want[2])
      problem = std::string(what) + " at epoch " + std::to_string(epoch) + " (" + std::to_string(y) +
                ") should be a dot at (" + std::to_string(x0 + px) + ", " + std::to_string(py) + "), found rgb(" +
                std::to_string(p[0]) + "," + std::to_string(p[1]) + "," + std::to_string(p[2]) + ")";
  };
  for (const auto& pt : points) {
    expect(l.loss, 0, pt.epoch, pt.loss, "loss");
    expect(l.accuracy, l.accuracy_x, pt.epoch, pt.accuracy, "accuracy");
  }
  stbi_image_free(rgb);
  return problem;
}

}  // namespace lessons
