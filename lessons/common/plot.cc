#include "lessons/common/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "stb/stb_easy_font.h"
#include "stb/stb_image.h"
#pragma GCC diagnostic pop
#include "stb/stb_image_write.h"
#include "tensor/check.h"

namespace lessons {

const std::vector<Color>& palette() {
  static const std::vector<Color> p{kBlue, kOrange, kGreen, kRed, kPurple};
  return p;
}

Canvas::Canvas(int width, int height, Color bg) : w_(width), h_(height), rgb_(size_t(width) * size_t(height) * 3) {
  ENGINE_REQUIRE(width > 0 && height > 0, "[Canvas] size must be positive, got ", width, "x", height);
  fill_rect(0, 0, width, height, bg);
}

void Canvas::set(int x, int y, Color c) {
  if (x < 0 || y < 0 || x >= w_ || y >= h_) return;
  std::copy(c.begin(), c.end(), rgb_.begin() + (ptrdiff_t(y) * w_ + x) * 3);
}

Color Canvas::get(int x, int y) const {
  ENGINE_REQUIRE(x >= 0 && y >= 0 && x < w_ && y < h_, "[Canvas] pixel (", x, ", ", y, ") is outside ", w_, "x", h_);
  const uint8_t* p = &rgb_[(size_t(y) * size_t(w_) + size_t(x)) * 3];
  return {p[0], p[1], p[2]};
}

void Canvas::fill_rect(int x0, int y0, int x1, int y1, Color c) {
  for (int y = std::max(0, y0); y < std::min(h_, y1); ++y)
    for (int x = std::max(0, x0); x < std::min(w_, x1); ++x) set(x, y, c);
}

// Cuts the segment (x0, y0)-(x1, y1) to the box [lo, hi] x [lo_y, hi_y] (Liang-Barsky: the
// segment is x0 + t dx for t in [0, 1]; each side of the box bounds t from one end).
// False when nothing of it is inside.
static bool clip_segment(double& x0, double& y0, double& x1, double& y1, double lo_x, double lo_y, double hi_x,
                         double hi_y) {
  const double dx = x1 - x0, dy = y1 - y0;
  if (!std::isfinite(dx) || !std::isfinite(dy)) return false;
  const double p[4] = {-dx, dx, -dy, dy}, q[4] = {x0 - lo_x, hi_x - x0, y0 - lo_y, hi_y - y0};
  double t0 = 0, t1 = 1;
  for (int i = 0; i < 4; ++i) {
    if (p[i] == 0) {
      if (q[i] < 0) return false;  // parallel to this side and outside it
      continue;
    }
    const double t = q[i] / p[i];
    if (p[i] < 0)
      t0 = std::max(t0, t);
    else
      t1 = std::min(t1, t);
    if (t0 > t1) return false;
  }
  const double sx = x0, sy = y0;
  x0 = sx + t0 * dx, y0 = sy + t0 * dy, x1 = sx + t1 * dx, y1 = sy + t1 * dy;
  return true;
}

// Steps along the longer axis one pixel at a time, drawing a square dot of `thickness`.
// Only the part inside the canvas is stepped: a point far outside (a value off a chart's
// fixed range) costs nothing, and one that is not finite draws nothing.
void Canvas::line(double x0, double y0, double x1, double y1, Color c, int thickness) {
  if (!std::isfinite(x0) || !std::isfinite(y0) || !std::isfinite(x1) || !std::isfinite(y1)) return;
  const double m = thickness + 1.0;
  if (!clip_segment(x0, y0, x1, y1, -m, -m, w_ + m, h_ + m)) return;
  const int steps = std::max(1, int(std::ceil(std::max(std::fabs(x1 - x0), std::fabs(y1 - y0)))));
  const int lo = -(thickness - 1) / 2, hi = thickness / 2;
  for (int i = 0; i <= steps; ++i) {
    const double t = double(i) / steps;
    const int x = int(std::lround(x0 + t * (x1 - x0))), y = int(std::lround(y0 + t * (y1 - y0)));
    for (int dy = lo; dy <= hi; ++dy)
      for (int dx = lo; dx <= hi; ++dx) set(x + dx, y + dy, c);
  }
}

// stb_easy_font turns text into axis-aligned quads (4 vertices of 16 bytes: x, y, z as
// floats, then 4 colour bytes); each quad is filled as a rectangle, scaled.
void Canvas::text(int x, int y, const std::string& s, Color c, int scale) {
  std::vector<char> buf(s.size() * 1200 + 256);  // a glyph takes up to ~18 quads of 64 bytes
  std::string copy = s;
  const int quads = stb_easy_font_print(0, 0, copy.data(), nullptr, buf.data(), int(buf.size()));
  for (int q = 0; q < quads; ++q) {
    const float* v0 = reinterpret_cast<const float*>(buf.data() + q * 64);
    const float* v2 = reinterpret_cast<const float*>(buf.data() + q * 64 + 32);
    fill_rect(x + int(v0[0] * scale), y + int(v0[1] * scale), x + int(v2[0] * scale), y + int(v2[1] * scale), c);
  }
}

int Canvas::text_width(const std::string& s, int scale) {
  std::string copy = s;
  return stb_easy_font_width(copy.data()) * scale;
}

void Canvas::paste(const Canvas& other, int x, int y) {
  for (int j = 0; j < other.h_; ++j)
    for (int i = 0; i < other.w_; ++i) set(x + i, y + j, other.get(i, j));
}

void Canvas::save_png(const std::string& path) const {
  ENGINE_REQUIRE(stbi_write_png(path.c_str(), w_, h_, 3, rgb_.data(), w_ * 3) != 0, "[Canvas] cannot write PNG ", path);
}

static bool finite_point(const std::pair<double, double>& p) {
  return std::isfinite(p.first) && std::isfinite(p.second);
}

// How many of a series' points are not finite (a loss that became NaN): they have no place
// on the chart, and the chart says so in words rather than hide them.
static int64_t left_out(const Series& s) {
  return std::count_if(s.points.begin(), s.points.end(), [](auto& p) { return !finite_point(p); });
}

LineChart::Frame LineChart::frame() const {
  int legend = 0;  // the legend's width: a colour box and the longest name
  for (const auto& sr : series) legend = std::max(legend, 50 + Canvas::text_width(sr.name));
  Frame f{0, 1, 0, 1, 90, width - std::max(120, legend), 50, height - 60};
  // x spans every point with a finite x (so that charts of one run share their epochs), y
  // every finite point.
  bool any_x = false, any_y = false;
  for (const auto& s : series)
    for (const auto& p : s.points) {
      const auto [x, y] = p;
      if (!std::isfinite(x)) continue;
      if (!any_x) f.x_lo = f.x_hi = x, any_x = true;
      f.x_lo = std::min(f.x_lo, x), f.x_hi = std::max(f.x_hi, x);
      if (!std::isfinite(y)) continue;
      if (!any_y) f.y_lo = f.y_hi = y, any_y = true;
      f.y_lo = std::min(f.y_lo, y), f.y_hi = std::max(f.y_hi, y);
    }
  if (f.x_hi <= f.x_lo) f.x_hi = f.x_lo + 1;
  if (y_lo < y_hi) {
    f.y_lo = y_lo, f.y_hi = y_hi;
  } else {
    // 8% of the span each side. A flat series (a span the tick labels cannot show) gets 5%
    // of its value each side instead (1 around zero), as matplotlib does.
    const double span = f.y_hi - f.y_lo, size = std::max(std::fabs(f.y_lo), std::fabs(f.y_hi));
    const double margin = span > 1e-6 * size ? span * 0.08 : size > 0 ? 0.05 * size : 1;
    f.y_lo -= margin, f.y_hi += margin;
  }
  return f;
}

std::pair<int, int> LineChart::to_pixel(double x, double y) const {
  ENGINE_REQUIRE(std::isfinite(x) && std::isfinite(y), "[LineChart] the point (", x, ", ", y,
                 ") is not finite and has no pixel");
  const Frame f = frame();
  const double px = f.left + (x - f.x_lo) / (f.x_hi - f.x_lo) * (f.right - f.left);
  const double py = f.bottom - (y - f.y_lo) / (f.y_hi - f.y_lo) * (f.bottom - f.top);
  // A point far off a fixed range stays far off, within what an int holds.
  const auto round = [](double v) { return int(std::lround(std::clamp(v, -1e9, 1e9))); };
  return {round(px), round(py)};
}

// Round tick positions: a step of 1, 2 or 5 times a power of ten, giving at most 6 ticks.
static std::vector<double> nice_ticks(double lo, double hi) {
  if (!(lo < hi) || !std::isfinite(hi - lo)) return {};
  const double raw = (hi - lo) / 5, power = std::pow(10.0, std::floor(std::log10(raw)));
  double step = power;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * power >= raw) {
      step = m * power;
      break;
    }
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step)
    ticks.push_back(std::fabs(t) < step * 1e-9 ? 0 : t);
  return ticks;
}

static std::string number(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

Canvas LineChart::draw() const {
  const Frame f = frame();
  Canvas c(width, height);
  c.text((width - Canvas::text_width(title)) / 2, 8, title, kBlack);
  for (double yv : nice_ticks(f.y_lo, f.y_hi)) {
    const int py = to_pixel(f.x_lo, yv).second;
    c.line(f.left, py, f.right, py, kGrey);
    c.text(f.left - 8 - Canvas::text_width(number(yv)), py - 6, number(yv), kBlack);
  }
  for (double xv : nice_ticks(f.x_lo, f.x_hi)) {
    const int px = to_pixel(xv, f.y_lo).first;
    c.line(px, f.top, px, f.bottom, kGrey);
    c.text(px - Canvas::text_width(number(xv)) / 2, f.bottom + 8, number(xv), kBlack);
  }
  c.line(f.left, f.bottom, f.right, f.bottom, kBlack, 2);
  c.line(f.left, f.top, f.left, f.bottom, kBlack, 2);
  c.text((f.left + f.right - Canvas::text_width(x_label)) / 2, height - 28, x_label, kBlack);
  c.text(8, f.top - 20, y_label, kBlack);
  // Under the top edge, a line for each series with values that are not finite (NaN or inf).
  int note_y = f.top + 6;
  for (const Series& s : series)
    if (const int64_t n = left_out(s); n > 0) {
      c.text(f.left + 8, note_y, s.name + ": " + std::to_string(n) + " not finite", kRed);
      note_y += 18;
    }
  // The series: lines between points, a 5x5 dot on each point, and a legend on the right.
  for (size_t k = 0; k < series.size(); ++k) {
    const Series& s = series[k];
    for (size_t i = 0; i + 1 < s.points.size(); ++i) {
      if (!finite_point(s.points[i]) || !finite_point(s.points[i + 1])) continue;  // a gap where a value is missing
      auto [x0, y0] = to_pixel(s.points[i].first, s.points[i].second);
      auto [x1, y1] = to_pixel(s.points[i + 1].first, s.points[i + 1].second);
      c.line(x0, y0, x1, y1, s.color, 2);
    }
    for (const auto& p : s.points) {
      if (!finite_point(p)) continue;
      auto [px, py] = to_pixel(p.first, p.second);
      c.fill_rect(px - 2, py - 2, px + 3, py + 3, s.color);
    }
    const int ly = f.top + 10 + int(k) * 24;
    c.fill_rect(f.right + 15, ly, f.right + 35, ly + 10, s.color);
    c.text(f.right + 42, ly - 2, s.name, kBlack);
  }
  return c;
}

std::string check_chart_png(const std::string& png_path, const LineChart& chart, int x0, int y0, int width,
                            int height) {
  if (width == 0) width = chart.width, height = chart.height;
  int w = 0, h = 0, channels = 0;
  unsigned char* rgb = stbi_load(png_path.c_str(), &w, &h, &channels, 3);
  if (!rgb) return png_path + " is not a readable image: " + stbi_failure_reason();
  std::string problem;
  if (w != width || h != height)
    problem = png_path + " is " + std::to_string(w) + "x" + std::to_string(h) + ", expected " + std::to_string(width) +
              "x" + std::to_string(height);
  for (size_t k = 0; k < chart.series.size() && problem.empty(); ++k)
    for (const auto& [x, y] : chart.series[k].points) {
      if (!finite_point({x, y})) continue;  // not drawn, and said so in words on the chart
      const auto [px, py] = chart.to_pixel(x, y);
      const int X = x0 + px, Y = y0 + py;
      Color found{255, 255, 255};
      if (X >= 0 && X < w && Y >= 0 && Y < h) {
        const unsigned char* p = rgb + (size_t(Y) * size_t(w) + size_t(X)) * 3;
        found = {p[0], p[1], p[2]};
      }
      bool ok = false;  // its own colour, or a series drawn after it, on top
      for (size_t j = k; j < chart.series.size() && !ok; ++j) ok = found == chart.series[j].color;
      if (ok) continue;
      char at[160];
      std::snprintf(at, sizeof at, " at (%g, %g) should be a dot at (%d, %d), found rgb(%d,%d,%d)", x, y, X, Y,
                    found[0], found[1], found[2]);
      problem = chart.title + ", " + chart.series[k].name + at;
      break;
    }
  stbi_image_free(rgb);
  return problem;
}

}  // namespace lessons
