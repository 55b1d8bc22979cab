// The pictures tell the truth: text makes ink, and a curves picture passes its check
// exactly when it shows the numbers it was drawn from.
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "catch2/catch.hpp"
#include "lessons/common/bars.h"
#include "lessons/common/curves.h"
#include "tests/testing/tmp_path.h"

using engine::testing::tmp_path;

using namespace lessons;

TEST_CASE("text draws dark pixels inside its width and nowhere else") {
  Canvas c(200, 40);
  c.text(10, 10, "0123456789.%", kBlack);
  int inside = 0, outside = 0;
  for (int y = 0; y < 40; ++y)
    for (int x = 0; x < 200; ++x) {
      const bool ink = c.get(x, y) == kBlack;
      const bool in_box = x >= 10 && x < 10 + Canvas::text_width("0123456789.%") && y >= 10 && y < 30;
      (in_box ? inside : outside) += ink ? 1 : 0;
    }
  CHECK(inside > 200);
  CHECK(outside == 0);
}

TEST_CASE("a curves picture passes its check, and fails it for other numbers") {
  const std::vector<EpochPoint> run{{1, 0.54, 83.0}, {2, 0.38, 85.4}, {3, 0.33, 86.5}, {4, 0.30, 86.9}};
  write_curves_csv(tmp_path("curves.csv"), run);
  save_curves_png(tmp_path("curves.png"), {{"run", run}}, "test");
  CHECK(read_curves_csv(tmp_path("curves.csv")).size() == 4);
  CHECK(check_curves_png(tmp_path("curves.png"), {{"run", tmp_path("curves.csv")}}, "test").empty());

  // The same picture against a CSV whose third loss is different: the check names it.
  std::vector<EpochPoint> other = run;
  other[2].loss = 0.45;
  write_curves_csv(tmp_path("other.csv"), other);
  const std::string problem = check_curves_png(tmp_path("curves.png"), {{"run", tmp_path("other.csv")}}, "test");
  CHECK(problem.find("test: training loss, train loss at (3, 0.45)") != std::string::npos);
  // And a file that is not a picture.
  CHECK(check_curves_png(tmp_path("curves.csv"), {{"run", tmp_path("curves.csv")}}, "test")
            .find("not a readable image") != std::string::npos);
}

TEST_CASE("two runs on one picture: each is checked in its own colour") {
  const std::vector<EpochPoint> ddp{{1, 0.54, 83.0}, {2, 0.38, 85.4}, {3, 0.33, 86.5}};
  const std::vector<EpochPoint> alone{{1, 0.50, 84.0}, {2, 0.36, 86.0}, {3, 0.31, 87.1}};
  write_curves_csv(tmp_path("ddp.csv"), ddp);
  write_curves_csv(tmp_path("alone.csv"), alone);
  save_curves_png(tmp_path("two.png"), {{"DDP x2", ddp}, {"1 process", alone}}, "two");
  CHECK(check_curves_png(tmp_path("two.png"), {{"DDP x2", tmp_path("ddp.csv")}, {"1 process", tmp_path("alone.csv")}},
                         "two")
            .empty());
  // The second run drawn with another epoch-2 loss (inside the same range): named.
  std::vector<EpochPoint> changed = alone;
  changed[1].loss = 0.45;
  save_curves_png(tmp_path("one.png"), {{"DDP x2", ddp}, {"1 process", changed}}, "two");
  const std::string problem = check_curves_png(
      tmp_path("one.png"), {{"DDP x2", tmp_path("ddp.csv")}, {"1 process", tmp_path("alone.csv")}}, "two");
  CHECK(problem.find("training loss, 1 process at (2, 0.36)") != std::string::npos);
}

TEST_CASE("a malformed CSV is named with its line") {
  write_curves_csv(tmp_path("bad.csv"), {{1, 0.5, 80}});
  FILE* f = std::fopen(tmp_path("bad.csv").c_str(), "a");
  std::fputs("2;0.4;81\n", f);
  std::fclose(f);
  REQUIRE_THROWS_WITH(read_curves_csv(tmp_path("bad.csv")), Catch::Contains("line 3"));
}

TEST_CASE("a loss that became NaN or inf is left out of the chart, the rest drawn in range") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  LineChart chart{"diverged", "epoch", "loss", {}};
  chart.series.push_back({"train loss", kBlue, {{1, 0.5}, {2, nan}, {3, inf}, {4, 0.3}}});
  chart.save_png(tmp_path("diverged.png"));
  CHECK(check_chart_png(tmp_path("diverged.png"), chart).empty());
  // The finite points keep a scale of their own: inside the picture, the larger one higher.
  const auto [x1, y1] = chart.to_pixel(1, 0.5);
  const auto [x4, y4] = chart.to_pixel(4, 0.3);
  CHECK(y1 > 40);
  CHECK(y4 < chart.height - 40);
  CHECK(y4 - y1 > 200);
  CHECK(x4 - x1 > 200);
  REQUIRE_THROWS_WITH(chart.to_pixel(2, nan), Catch::Contains("not finite"));
}

TEST_CASE("a flat series gets a range its tick labels can tell apart") {
  LineChart chart{"flat", "epoch", "accuracy", {}};
  chart.series.push_back({"test accuracy", kOrange, {{1, 10.7}, {2, 10.7}, {3, 10.7}}});
  // 5% of the value each side: 10.7 * 1.04 is inside the plot, well above 10.7.
  const int at = chart.to_pixel(1, 10.7).second, above = chart.to_pixel(1, 10.7 * 1.04).second;
  CHECK(above > 40);
  CHECK(at - above > 100);
  LineChart zero{"zero", "epoch", "loss", {}};
  zero.series.push_back({"loss", kBlue, {{1, 0}, {2, 0}}});
  CHECK(zero.to_pixel(1, 0).second - zero.to_pixel(1, 0.9).second > 100);
}

TEST_CASE("a line is drawn where it crosses the canvas, however far its ends are") {
  Canvas c(100, 100);
  c.line(10, 10, 1e300, 1e300, kBlack);  // steps only the visible part
  CHECK(c.get(50, 50) == kBlack);
  CHECK(c.get(99, 99) == kBlack);
  c.line(-1e12, 70, 1e12, 70, kRed);
  CHECK(c.get(0, 70) == kRed);
  CHECK(c.get(99, 70) == kRed);
  Canvas blank(100, 100);
  blank.line(10, 10, std::nan(""), 50, kBlack);
  blank.line(10, 10, 50, std::numeric_limits<double>::infinity(), kBlack);
  int ink = 0;
  for (int y = 0; y < 100; ++y)
    for (int x = 0; x < 100; ++x) ink += blank.get(x, y) != kWhite;
  CHECK(ink == 0);
}

TEST_CASE("curves with NaN and inf are written as nan and inf and read back") {
  const double nan = -std::numeric_limits<double>::quiet_NaN();  // the sign bit set, as 0/0 gives on x86
  write_curves_csv(tmp_path("nan.csv"),
                   {{1, 2.3, 10.7}, {2, nan, 10.0}, {3, std::numeric_limits<double>::infinity(), 9}});
  std::ifstream f(tmp_path("nan.csv"));
  std::stringstream text;
  text << f.rdbuf();
  CHECK(text.str() == "epoch,loss,test_accuracy_percent\n1,2.3,10.7\n2,nan,10\n3,inf,9\n");
  const auto back = read_curves_csv(tmp_path("nan.csv"));
  REQUIRE(back.size() == 3);
  CHECK(std::isnan(back[1].loss));
  CHECK(std::isinf(back[2].loss));
  CHECK(back[2].epoch == 3);
  // A diverged run's picture passes its check: its finite points are all there.
  save_curves_png(tmp_path("nan.png"), {{"run", back}}, "nan");
  CHECK(check_curves_png(tmp_path("nan.png"), {{"run", tmp_path("nan.csv")}}, "nan").empty());
}

TEST_CASE("a stacked bar chart passes its check, and fails it for other numbers") {
  BarChart c{
      "bytes per rank", "MB", {"parameters", "gradients", "state"}, {{"DDP", {1, 1, 2}}, {"FSDP", {0.5, 0.5, 1}}}};
  c.save_png(tmp_path("bars.png"));
  CHECK(check_bars_png(tmp_path("bars.png"), c).empty());
  BarChart other = c;
  other.bars[1].parts[2] = 3;  // FSDP's state drawn three times as tall
  CHECK(check_bars_png(tmp_path("bars.png"), other).find("FSDP, state") != std::string::npos);
}
