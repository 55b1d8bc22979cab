// Checks that a curves picture shows exactly the numbers of its runs' CSVs
// (check_curves_png): exits 0 if so, else 1 naming the first point that is not where it
// should be. Each run is NAME=CSV, in the order they were drawn.
//
//   chart_check out/02_ddp_basics/curves.png "Fashion-MNIST mlp" "DDP x2=out/02_ddp_basics/curves.csv"
#include <cstdio>

#include "lessons/common/curves.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: chart_check PICTURE.png TITLE NAME=CURVES.csv [NAME=CURVES.csv ...]\n");
    return 2;
  }
  try {
    std::vector<std::pair<std::string, std::string>> runs;
    for (int i = 3; i < argc; ++i) {
      const std::string arg = argv[i];
      const size_t eq = arg.find('=');
      if (eq == std::string::npos) {
        std::fprintf(stderr, "chart_check: \"%s\" is not NAME=CURVES.csv\n", argv[i]);
        return 2;
      }
      runs.push_back({arg.substr(0, eq), arg.substr(eq + 1)});
    }
    const std::string problem = lessons::check_curves_png(argv[1], runs, argv[2]);
    if (!problem.empty()) {
      std::fprintf(stderr, "chart_check: %s\n", problem.c_str());
      return 1;
    }
    std::printf("chart_check: %s shows every point of its %zu run(s)\n", argv[1], runs.size());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "chart_check: %s\n", e.what());
    return 1;
  }
}
