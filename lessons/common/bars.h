// Stacked bar charts for the lessons (memory per rank, split into what holds it), written
// as PNG, and a check that reads a picture back and finds every segment where it belongs.
//
//   BarChart c{"bytes per rank", "MB", {"parameters", "gradients", "optimizer state"}};
//   c.bars.push_back({"DDP", {1.08, 1.08, 2.15}});
//   c.bars.push_back({"FULL_SHARD", {0.27, 0.27, 0.54}});
//   c.save_png("out/memory.png");
//   std::string problem = check_bars_png("out/memory.png", c);   // "" when it shows c
#pragma once

#include <string>
#include <vector>

#include "lessons/common/plot.h"

namespace lessons {

struct Bar {
  std::string label;
  std::vector<double> parts;  // one value per segment, bottom first
};

struct BarChart {
  std::string title, y_label;
  std::vector<std::string> segments;  // the parts' names, for the legend (colours: palette())
  std::vector<Bar> bars;
  int width = 800, height = 480;

  // The pixel rectangle [x0, x1) x [y0, y1) of bar b's segment s.
  struct Box {
    int x0, y0, x1, y1;
  };
  Box box(size_t b, size_t s) const;
  Canvas draw() const;
  void save_png(const std::string& path) const { draw().save_png(path); }

 private:
  double top_value() const;  // the y axis' upper end
};

// "" when the picture at png_path shows `chart`: the middle of every segment of at least
// 3 pixels has its colour; otherwise what is wrong, naming the bar and the segment.
std::string check_bars_png(const std::string& png_path, const BarChart& chart);

}  // namespace lessons
