// The pictures tell the truth: text makes ink, and a curves picture passes its check
// exactly when it shows the numbers it was drawn from.
#include <cstdlib>
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

TEST_CASE("a stacked bar chart passes its check, and fails it for other numbers") {
  BarChart c{
      "bytes per rank", "MB", {"parameters", "gradients", "state"}, {{"DDP", {1, 1, 2}}, {"FSDP", {0.5, 0.5, 1}}}};
  c.save_png(tmp_path("bars.png"));
  CHECK(check_bars_png(tmp_path("bars.png"), c).empty());
  BarChart other = c;
  other.bars[1].parts[2] = 3;  // FSDP's state drawn three times as tall
  CHECK(check_bars_png(tmp_path("bars.png"), other).find("FSDP, state") != std::string::npos);
}
