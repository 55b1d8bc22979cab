// Pictures for the lessons, written as PNG: an RGB canvas with lines, boxes and text (the
// text drawn with stb_easy_font's blocky letters), and a line chart built on it.
//
//   LineChart chart{"loss per epoch", "epoch", "loss"};
//   chart.series.push_back({"train loss", kBlue, {{1, 0.54}, {2, 0.38}, {3, 0.33}}});
//   chart.save_png("out/loss.png");
//
// A chart maps data to pixels through to_pixel(), which tests use to check that the line
// of every series passes through every one of its points. A point that is not finite (a
// loss that became NaN) is left out, with a gap in its line, and a line of text on the
// chart says how many were left out; a flat series gets 5% of its value above and below.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace lessons {

using Color = std::array<uint8_t, 3>;
inline constexpr Color kWhite{255, 255, 255}, kBlack{0, 0, 0}, kGrey{200, 200, 200}, kBlue{31, 119, 180},
    kOrange{255, 127, 14}, kGreen{44, 160, 44}, kRed{214, 39, 40}, kPurple{148, 103, 189};
// The colours given to series (and ranks) in order.
const std::vector<Color>& palette();

class Canvas {
 public:
  Canvas(int width, int height, Color background = kWhite);
  int width() const { return w_; }
  int height() const { return h_; }
  void set(int x, int y, Color c);  // pixels outside are ignored
  Color get(int x, int y) const;
  void fill_rect(int x0, int y0, int x1, int y1, Color c);  // [x0, x1) x [y0, y1)
  // Only the part inside the canvas is drawn; a line with an end that is not finite is not.
  void line(double x0, double y0, double x1, double y1, Color c, int thickness = 1);
  // Text with its top-left corner at (x, y); scale 2 makes letters about 14 px tall.
  void text(int x, int y, const std::string& s, Color c, int scale = 2);
  static int text_width(const std::string& s, int scale = 2);
  void paste(const Canvas& other, int x, int y);  // other's top-left corner at (x, y)
  void save_png(const std::string& path) const;   // throws naming the path on failure

 private:
  int w_, h_;
  std::vector<uint8_t> rgb_;
};

struct Series {
  std::string name;
  Color color;
  std::vector<std::pair<double, double>> points;
};

struct LineChart {
  std::string title, x_label, y_label;
  std::vector<Series> series;
  int width = 800, height = 500;
  // Fixed y range; when lo >= hi the range comes from the data (with a margin).
  double y_lo = 0, y_hi = 0;

  // Where the data point (x, y) lands in the picture; throws when x or y is not finite.
  std::pair<int, int> to_pixel(double x, double y) const;
  Canvas draw() const;
  void save_png(const std::string& path) const { draw().save_png(path); }

 private:
  struct Frame {
    double x_lo, x_hi, y_lo, y_hi;
    int left, right, top, bottom;
  };
  Frame frame() const;
};

// Reads the picture back from png_path and checks that it shows `chart`: "" when at every
// finite point of every series the pixel has the series' colour (or that of a series drawn after
// it, on top); otherwise what is wrong, naming the series and the point. (x0, y0): where
// the chart sits in the picture; size: the picture's expected size (0: the chart's).
std::string check_chart_png(const std::string& png_path, const LineChart& chart, int x0 = 0, int y0 = 0, int width = 0,
                            int height = 0);

}  // namespace lessons
