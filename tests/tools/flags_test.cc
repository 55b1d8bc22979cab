#include "tools/flags/flags.h"

#include <catch2/catch.hpp>

#include "tensor/check.h"

using engine::Error;
using engine::Flags;

namespace {
struct Program {
  int epochs = 10;
  int64_t batch = 64;
  double lr = 0.1;
  uint64_t seed = 0;
  std::string model = "mlp", checkpoint;
  bool resume = false;
  std::vector<int64_t> sizes{1, 2};
  Flags flags{"train", "a test program"};
  Program() {
    flags.add("--epochs", &epochs, 0, 1000, "epochs");
    flags.add("--batch", &batch, 1, 1 << 20, "batch");
    flags.add("--lr", &lr, 0, 10, "learning rate");
    flags.add("--seed", &seed, "seed");
    flags.add("--model", &model, {"mlp", "cnn"}, "model");
    flags.add("--checkpoint", &checkpoint, "path");
    flags.add("--resume", &resume, "resume");
    flags.add_list("--sizes", &sizes, 1, 1 << 30, "sizes");
  }
  bool parse(std::vector<const char*> args) {
    args.insert(args.begin(), "train");
    return flags.parse(int(args.size()), args.data());
  }
};

std::string error_of(std::vector<const char*> args) {
  Program p;
  try {
    p.parse(args);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("flags: both spellings set every kind of value") {
  Program p;
  REQUIRE(p.parse({"--epochs", "3", "--batch=256", "--lr", "0.05", "--seed=7", "--model", "cnn", "--checkpoint=a b",
                   "--resume", "--sizes", "5", "6", "7"}));
  CHECK(p.epochs == 3);
  CHECK(p.batch == 256);
  CHECK(p.lr == 0.05);
  CHECK(p.seed == 7);
  CHECK(p.model == "cnn");
  CHECK(p.checkpoint == "a b");
  CHECK(p.resume);
  CHECK(p.sizes == std::vector<int64_t>{5, 6, 7});
  CHECK(p.flags.given("--epochs"));
  CHECK_FALSE(Program().flags.given("--epochs"));
}

TEST_CASE("flags: defaults stay when a flag is absent; lists take --name=a,b") {
  Program p;
  REQUIRE(p.parse({"--sizes=8,9", "--resume=false"}));
  CHECK(p.epochs == 10);
  CHECK(p.sizes == std::vector<int64_t>{8, 9});
  CHECK_FALSE(p.resume);
  // ... and --name a,b, the form --help shows the defaults in, mixed with spaces.
  Program q;
  REQUIRE(q.parse({"--sizes", "8,9", "10"}));
  CHECK(q.sizes == std::vector<int64_t>{8, 9, 10});
}

TEST_CASE("flags: a default outside the flag's own range is refused when the flag is added") {
  Flags f{"prog", "a program with a bad default"};
  int count = 0;
  int64_t big = 5;
  double rate = -1;
  std::vector<int64_t> sizes{4, 0};
  REQUIRE_THROWS_WITH(f.add("--count", &count, 1, 100, "count"),
                      Catch::Contains("[flags] the default of --count, 0, is outside its range [1, 100]"));
  REQUIRE_THROWS_WITH(f.add("--big", &big, 6, 9, "big"), Catch::Contains("the default of --big, 5"));
  REQUIRE_THROWS_WITH(f.add("--rate", &rate, 0, 1, "rate"), Catch::Contains("the default of --rate, -1"));
  REQUIRE_THROWS_WITH(f.add_list("--sizes", &sizes, 1, 8, "sizes"), Catch::Contains("the default of --sizes, 0"));
}

TEST_CASE("flags: junk, out-of-range and unknown input is refused with the flag named") {
  CHECK(error_of({"--epochs", "abc"}) == "--epochs: expected an integer in [0, 1000], got \"abc\"");
  CHECK(error_of({"--epochs", "3x"}).find("--epochs") == 0);
  CHECK(error_of({"--epochs", ""}).find("--epochs") == 0);
  CHECK(error_of({"--epochs", "-1"}).find("--epochs") == 0);
  CHECK(error_of({"--epochs", "99999999999999999999"}).find("--epochs") == 0);
  CHECK(error_of({"--batch=0"}).find("--batch") == 0);
  CHECK(error_of({"--lr", "nan"}).find("--lr") == 0);
  CHECK(error_of({"--lr", "inf"}).find("--lr") == 0);
  CHECK(error_of({"--lr", "1e999"}).find("--lr") == 0);
  CHECK(error_of({"--lr", " 0.1"}).find("--lr") == 0);
  CHECK(error_of({"--seed", "-5"}).find("--seed") == 0);
  CHECK(error_of({"--model", "rnn"}) == "--model: expected one of mlp|cnn, got \"rnn\"");
  CHECK(error_of({"--epoch", "3"}) == "unknown flag --epoch");
  CHECK(error_of({"--epochs"}) == "--epochs: missing value");
  CHECK(error_of({"--epochs", "--lr", "1"}) == "--epochs: missing value");
  CHECK(error_of({"--epochs", "1", "--epochs", "2"}) == "--epochs given twice");
  CHECK(error_of({"--resume=yes"}).find("--resume") == 0);
  CHECK(error_of({"--sizes"}) == "--sizes: expected at least one value");
  CHECK(error_of({"--sizes", "4", "x"}).find("--sizes: expected an integer") == 0);
  // Every comma-separated item counts, empty ones too: "" gave an empty list, "4," a short one.
  for (const char* v : {"", "4,", ",4", "4,,8", ","})
    CHECK(error_of({"--sizes", v}) == std::string("--sizes: \"") + v +
                                          "\" has an empty item (a list is integers separated by commas or spaces, "
                                          "as 4096,8192)");
  CHECK(error_of({"--sizes=4,"}).find("--sizes: \"4,\" has an empty item") == 0);
  CHECK(error_of({"stray"}) == "unexpected argument \"stray\"");
  CHECK(error_of({"--checkpoint="}).find("--checkpoint") == 0);
}

TEST_CASE("flags: --help stops parsing and the usage lists every flag with its default") {
  Program p;
  CHECK_FALSE(p.parse({"--epochs", "3", "--help", "--epochs", "junk"}));
  const std::string u = p.flags.usage();
  CHECK(u.find("usage: train [flags]") == 0);
  CHECK(u.find("--epochs VALUE  epochs [default: 10]") != std::string::npos);
  CHECK(u.find("--model VALUE  model (mlp|cnn) [default: mlp]") != std::string::npos);
  CHECK(u.find("--sizes N...") != std::string::npos);
}

TEST_CASE("flags: positional arguments are required, in order") {
  Flags f("export", "");
  std::string out, count;
  f.add_positional("OUT_DIR", &out, "where");
  f.add_positional("PER_CLASS", &count, "how many");
  const char* ok[] = {"export", "/tmp/x", "30"};
  REQUIRE(f.parse(3, ok));
  CHECK(out == "/tmp/x");
  CHECK(count == "30");
  Flags g("export", "");
  g.add_positional("OUT_DIR", &out, "where");
  g.add_positional("PER_CLASS", &count, "how many");
  const char* short_[] = {"export", "/tmp/x"};
  CHECK_THROWS_WITH(g.parse(2, short_), "missing argument PER_CLASS");
  Flags h("export", "");
  h.add_positional("OUT_DIR", &out, "where");
  const char* empty[] = {"export", ""};
  CHECK_THROWS_WITH(h.parse(2, empty), "OUT_DIR: expected a value, got an empty string");
}

TEST_CASE("flags: two that contradict each other are refused together") {
  auto make = [](bool* off, std::string* path, bool* resume) {
    Flags f("train", "");
    f.add("--no-checkpoint", off, "save nothing");
    f.add("--checkpoint", path, "where");
    f.add("--resume", resume, "continue");
    f.exclusive("--no-checkpoint", "--checkpoint");
    f.exclusive("--no-checkpoint", "--resume");
    return f;
  };
  bool off = false, resume = false;
  std::string path;
  const char* both[] = {"train", "--checkpoint", "x.st", "--no-checkpoint"};
  CHECK_THROWS_WITH(make(&off, &path, &resume).parse(4, both),
                    "--no-checkpoint and --checkpoint cannot be given together");
  const char* resume_nothing[] = {"train", "--resume", "--no-checkpoint"};
  CHECK_THROWS_WITH(make(&off, &path, &resume).parse(3, resume_nothing),
                    "--no-checkpoint and --resume cannot be given together");
  const char* switched_off[] = {"train", "--no-checkpoint=false", "--checkpoint", "x.st"};
  CHECK(make(&off, &path, &resume).parse(4, switched_off));
  CHECK(path == "x.st");
  const char* one[] = {"train", "--no-checkpoint"};
  CHECK(make(&off, &path, &resume).parse(2, one));
  CHECK(off);
  Flags f("p", "");
  CHECK_THROWS_WITH(f.exclusive("--a", "--b"), Catch::Contains("both must be added first"));
}
