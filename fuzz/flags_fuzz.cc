// Fuzzes the command-line parser every program uses (tools/flags): the input, split at
// NUL bytes, becomes argv for a parser with a flag of every kind. It parses, stops at
// --help, or fails with engine::Error; a value that parses is within its range.
#include <cstdlib>
#include <string>
#include <vector>

#include "tensor/check.h"
#include "tools/flags/flags.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> args{"prog"};
  std::string cur;
  for (char c : text) {
    if (c == '\0')
      args.push_back(cur), cur.clear();
    else
      cur += c;
  }
  args.push_back(cur);
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());

  int epochs = 1;
  int64_t batch = 64;
  uint64_t seed = 0;
  double lr = 0.1;
  std::string model = "mlp", path;
  bool resume = false;
  std::vector<int64_t> sizes{4};
  std::string out_dir;
  engine::Flags flags("prog", "fuzzed");
  flags.add("--epochs", &epochs, 0, 1000, "");
  flags.add("--batch", &batch, 1, 1 << 20, "");
  flags.add("--seed", &seed, "");
  flags.add("--lr", &lr, 0, 10, "");
  flags.add("--model", &model, {"mlp", "cnn"}, "");
  flags.add("--checkpoint", &path, "");
  flags.add("--resume", &resume, "");
  flags.add_list("--sizes", &sizes, 4, 1 << 30, "");
  flags.add_positional("OUT", &out_dir, "");
  try {
    if (flags.parse(int(argv.size()), argv.data())) {
      const bool ok = epochs >= 0 && epochs <= 1000 && batch >= 1 && batch <= (1 << 20) && lr >= 0 && lr <= 10 &&
                      (model == "mlp" || model == "cnn") && !out_dir.empty() && !sizes.empty();
      for (int64_t s : sizes)
        if (s < 4 || s > (1 << 30)) std::abort();
      if (!ok) std::abort();
    }
    (void)flags.usage();
  } catch (const engine::Error&) {}
  return 0;
}
