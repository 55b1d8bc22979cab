#include "lessons/common/bars.h"

#include <algorithm>
#include <cstdio>

#include "stb/stb_image.h"

namespace lessons {

namespace {
constexpr int kLeft = 90, kRight = 250, kTop = 50, kBottom = 70;  // margins: axis labels, legend
}

double BarChart::top_value() const {
  double top = 0;
  for (const Bar& b : bars) {
    double total = 0;
    for (double v : b.parts) total += v;
    top = std::max(top, total);
  }
  return top > 0 ? top * 1.1 : 1;
}

BarChart::Box BarChart::box(size_t b, size_t s) const {
  const int plot_w = width - kLeft - kRight, plot_h = height - kTop - kBottom;
  const int slot = plot_w / int(std::max<size_t>(bars.size(), 1)), bar_w = slot * 3 / 5;
  const int x0 = kLeft + int(b) * slot + (slot - bar_w) / 2;
  double below = 0;
  for (size_t i = 0; i < s; ++i) below += bars[b].parts[i];
  const double scale = plot_h / top_value();
  const int y_bottom = height - kBottom - int(below * scale + 0.5);
  const int y_top = height - kBottom - int((below + bars[b].parts[s]) * scale + 0.5);
  return {x0, y_top, x0 + bar_w, y_bottom};
}

Canvas BarChart::draw() const {
  Canvas c(width, height);
  c.text((width - Canvas::text_width(title)) / 2, 12, title, kBlack);
  c.text(8, kTop - 22, y_label, kBlack);
  const int bottom = height - kBottom;
  // Four gridlines with their values.
  for (int i = 0; i <= 4; ++i) {
    const double v = top_value() * i / 4.4;
    const int y = bottom - int(v * (height - kTop - kBottom) / top_value() + 0.5);
    c.line(kLeft, y, width - kRight, y, kGrey);
    char label[32];
    std::snprintf(label, sizeof label, "%.2f", v);
    c.text(kLeft - 8 - Canvas::text_width(label), y - 6, label, kBlack);
  }
  for (size_t b = 0; b < bars.size(); ++b) {
    for (size_t s = 0; s < bars[b].parts.size(); ++s) {
      const Box r = box(b, s);
      c.fill_rect(r.x0, r.y0, r.x1, r.y1, palette()[s % palette().size()]);
    }
    const Box base = box(b, 0);
    c.text((base.x0 + base.x1 - Canvas::text_width(bars[b].label)) / 2, bottom + 10, bars[b].label, kBlack);
  }
  c.line(kLeft, bottom, width - kRight, bottom, kBlack, 2);
  c.line(kLeft, kTop, kLeft, bottom, kBlack, 2);
  for (size_t s = 0; s < segments.size(); ++s) {
    const int y = kTop + 10 + int(s) * 24;
    c.fill_rect(width - kRight + 15, y, width - kRight + 35, y + 10, palette()[s % palette().size()]);
    c.text(width - kRight + 42, y - 2, segments[s], kBlack);
  }
  return c;
}

std::string check_bars_png(const std::string& png_path, const BarChart& chart) {
  int w = 0, h = 0, channels = 0;
  unsigned char* rgb = stbi_load(png_path.c_str(), &w, &h, &channels, 3);
  if (!rgb) return png_path + " is not a readable image: " + stbi_failure_reason();
  std::string problem;
  if (w != chart.width || h != chart.height)
    problem = png_path + " is " + std::to_string(w) + "x" + std::to_string(h) + ", expected " +
              std::to_string(chart.width) + "x" + std::to_string(chart.height);
  for (size_t b = 0; b < chart.bars.size() && problem.empty(); ++b)
    for (size_t s = 0; s < chart.bars[b].parts.size() && problem.empty(); ++s) {
      const BarChart::Box r = chart.box(b, s);
      if (r.y1 - r.y0 < 3) continue;  // too thin to see
      const int x = (r.x0 + r.x1) / 2, y = (r.y0 + r.y1) / 2;
      const unsigned char* p = rgb + (size_t(y) * size_t(w) + size_t(x)) * 3;
      const Color want = palette()[s % palette().size()];
      if (p[0] != want[0] || p[1] != want[1] || p[2] != want[2])
        problem = chart.bars[b].label + ", " + (s < chart.segments.size() ? chart.segments[s] : "segment") +
                  ": expected its colour at (" + std::to_string(x) + ", " + std::to_string(y) + ")";
    }
  stbi_image_free(rgb);
  return problem;
}

}  // namespace lessons
