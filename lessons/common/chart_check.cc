// Checks that a curves picture shows exactly the numbers of its CSV (check_curves_png):
// exits 0 if so, else 1 naming the first point that is not where it should be.
//
//   chart_check out/02_ddp_basics/curves.png out/02_ddp_basics/curves.csv "Fashion-MNIST mlp, DDP x2"
#include <cstdio>

#include "lessons/common/curves.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: chart_check PICTURE.png CURVES.csv TITLE\n");
    return 2;
  }
  try {
    const std::string problem = lessons::check_curves_png(argv[1], argv[2], argv[3]);
    if (!problem.empty()) {
      std::fprintf(stderr, "chart_check: %s\n", problem.c_str());
      return 1;
    }
    std::printf("chart_check: %s shows every point of %s\n", argv[1], argv[2]);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "chart_check: %s\n", e.what());
    return 1;
  }
}
