// One strict command-line parser for every program in the engine. It accepts
// `--flag value` and `--flag=value`, range-checks numbers, refuses unknown flags, missing
// values and junk with the flag named, and prints --help from the flags it was given.
//
//   engine::Flags flags("train", "Trains an MLP or a small CNN on Fashion-MNIST.");
//   int epochs = 10;
//   std::string model = "mlp";
//   bool resume = false;
//   flags.add("--epochs", &epochs, 0, 100000, "epochs to train");
//   flags.add("--model", &model, {"mlp", "cnn"}, "the network");
//   flags.add("--resume", &resume, "continue from the checkpoint");
//   flags.parse_or_exit(argc, argv);  // --help: usage, exit 0; bad input: error + usage, exit 2
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace engine {

class Flags {
 public:
  Flags(std::string program, std::string about);

  // Integers and reals in [min, max]; the default is whatever *out holds now.
  void add(const std::string& name, int* out, int64_t min, int64_t max, const std::string& help);
  void add(const std::string& name, int64_t* out, int64_t min, int64_t max, const std::string& help);
  void add(const std::string& name, uint64_t* out, const std::string& help);  // any value in [0, 2^63)
  void add(const std::string& name, double* out, double min, double max, const std::string& help);
  // Text; with `choices`, one of them.
  void add(const std::string& name, std::string* out, const std::string& help);
  void add(const std::string& name, std::string* out, std::vector<std::string> choices, const std::string& help);
  // A switch: `--name` sets it (also `--name=true|false`).
  void add(const std::string& name, bool* out, const std::string& help);
  // A list of integers: `--name 1 2 3` (the values up to the next flag) or `--name=1,2,3`.
  void add_list(const std::string& name, std::vector<int64_t>* out, int64_t min, int64_t max, const std::string& help);
  // A required argument without a flag, taken in the order added.
  void add_positional(const std::string& name, std::string* out, const std::string& help);

  // Parses argv[1..argc); throws engine::Error naming the flag on bad input. Returns false
  // (having parsed nothing more) when --help or -h was given.
  bool parse(int argc, const char* const* argv);
  // parse(), then: --help prints usage and exits 0; an error prints it and the usage to
  // stderr and exits 2.
  void parse_or_exit(int argc, const char* const* argv);

  bool given(const std::string& name) const;  // was the flag on the command line?
  // Two flags that contradict each other (--no-checkpoint and --checkpoint PATH): parse()
  // refuses a command line that gives both (a switch given as =false does not count).
  void exclusive(const std::string& a, const std::string& b);
  std::string usage() const;

 private:
  struct Flag {
    std::string name, help, fallback;  // fallback: the default, as text for --help
    enum Kind { Value, Switch, List } kind = Value;
    std::function<void(const std::string&)> set;  // parses one value, throws on junk
    bool given = false;
    bool off = false;  // a switch given as --name=false
  };
  void add_flag(Flag f);
  Flag* find(const std::string& name);

  std::string program_, about_;
  std::vector<Flag> flags_, positionals_;
  std::vector<std::pair<std::string, std::string>> exclusive_;
};

}  // namespace engine
