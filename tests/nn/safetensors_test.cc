// safetensors checkpoints: round trips, the file layout read back by an independent reader
// (and by PyPI's safetensors + numpy where installed), every kind of corrupt file named in
// its error, and atomic saves that survive a kill -9 mid-write.
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "catch2/catch.hpp"
#include "nn/layers.h"
#include "nn/safetensors.h"
#include "tensor/ops.h"
#include "tests/testing/file_bytes.h"
#include "tests/testing/tmp_path.h"

using engine::testing::read_bytes;
using engine::testing::safetensors_file;
using engine::testing::tmp_path;
using engine::testing::write_bytes;

using namespace engine;
using namespace engine::nn;

namespace {

StateDict sample() {
  Generator g(1);
  return {{"layer.weight", randn({3, 4}, &g)},
          {"layer.bias", randn({3}, &g)},
          {"steps", from_vector(std::vector<int64_t>{7, -1})},
          {"scalar", scalar_tensor(2.5)},
          {"empty", zeros({0, 5})},
          {"strided", arange(0, 12).reshape({3, 4}).transpose(0, 1)}};
}
}  // namespace

TEST_CASE("save then load returns the same tensors, dtypes and metadata") {
  const StateDict sd = sample();
  save_safetensors(tmp_path("a.safetensors"), sd, {{"format", "pt"}, {"note", "quote \" and \\ ok"}});
  Metadata meta;
  const StateDict back = load_safetensors(tmp_path("a.safetensors"), &meta);
  REQUIRE(back.size() == sd.size());
  for (const auto& [k, t] : sd) {
    INFO(k);
    REQUIRE(back.at(k).shape() == t.shape());
    REQUIRE(back.at(k).dtype() == t.dtype());
    if (t.dtype() == DType::Float32)
      REQUIRE(back.at(k).to_vector<float>() == t.to_vector<float>());
    else
      REQUIRE(back.at(k).to_vector<int64_t>() == t.to_vector<int64_t>());
  }
  REQUIRE(meta.at("format") == "pt");
  REQUIRE(meta.at("note") == "quote \" and \\ ok");
}

TEST_CASE("the file layout, read back by an independent reader") {
  save_safetensors(tmp_path("b.safetensors"),
                   {{"w", tensor({1.5f, -2.0f})}, {"i", from_vector(std::vector<int64_t>{3})}});
  const std::string f = read_bytes(tmp_path("b.safetensors"));
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(uint8_t(f[i])) << (8 * i);
  REQUIRE(n % 8 == 0);  // data starts 8-byte aligned
  REQUIRE(f.size() == 8 + n + 8 + 8);
  const std::string header = f.substr(8, n);
  // Keys are written sorted: "i" (I64, bytes [0, 8)) then "w" (F32, bytes [8, 16)).
  REQUIRE(header.find("\"i\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}") != std::string::npos);
  REQUIRE(header.find("\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}") != std::string::npos);
  int64_t i;
  float w[2];
  std::memcpy(&i, f.data() + 8 + n, 8);
  std::memcpy(w, f.data() + 8 + n + 8, 8);
  REQUIRE(i == 3);
  REQUIRE(w[0] == 1.5f);
  REQUIRE(w[1] == -2.0f);
}

namespace {
// Runs a shell command and returns what it printed (REQUIREs that it exits 0).
std::string run_output(const std::string& cmd) {
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  REQUIRE(pclose(p) == 0);
  return out;
}

StateDict half_sample() {
  const Tensor x = from_vector(std::vector<float>{1.0f / 3, -2.5f, 65504, 1e-5f});
  return {{"b", x.to(DType::BFloat16)}, {"h", x.to(DType::Float16)}};
}
}  // namespace

TEST_CASE("bfloat16 and float16 tensors save as BF16 and F16 and load bit for bit") {
  save_safetensors(tmp_path("half.safetensors"), half_sample());
  const std::string bytes = read_bytes(tmp_path("half.safetensors"));
  REQUIRE(bytes.find(R"("dtype":"BF16")") != std::string::npos);
  REQUIRE(bytes.find(R"("dtype":"F16")") != std::string::npos);
  const StateDict back = load_safetensors(tmp_path("half.safetensors"));
  for (const auto& [k, t] : half_sample()) {
    REQUIRE(back.at(k).dtype() == t.dtype());
    const std::string a(back.at(k).bytes(), back.at(k).nbytes()), b(t.bytes(), t.nbytes());
    REQUIRE(a == b);
  }
}

TEST_CASE("other readers get our BF16 and F16 values (numpy for F16, PyTorch for BF16; where installed)") {
  save_safetensors(tmp_path("half2.safetensors"), half_sample());
  const std::string path = tmp_path("half2.safetensors");
  auto printed = [](const Tensor& t) {  // as Python's ' %.9g' % x prints each value
    std::string s;
    char buf[32];
    for (float v : t.to_vector<float>()) std::snprintf(buf, sizeof buf, " %.9g", double(v)), s += buf;
    return s;
  };
  const std::string expect_b = printed(half_sample().at("b")), expect_h = printed(half_sample().at("h"));
  if (std::system("python3 -c 'import safetensors, numpy' >/dev/null 2>&1") == 0) {
    const std::string out = run_output(
        "python3 -c \"import sys; from safetensors import safe_open; a = safe_open(sys.argv[1], 'np').get_tensor('h'); "
        "print(str(a.dtype) + ''.join(' %.9g' % float(x) for x in a))\" " +
        path);
    REQUIRE(out == "float16" + expect_h + "\n");
  } else {
    WARN("SKIPPED: the F16 check (python3 with safetensors and numpy is not available)");
  }
  if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0) {
    // PyTorch interprets the raw bytes the header points at as bfloat16.
    const std::string out = run_output(
        "/usr/bin/python3 -c \"import sys, json, struct, torch\n"
        "raw = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', raw[:8])[0]\n"
        "e = json.loads(raw[8:8 + n])['b']; a, b = e['data_offsets']\n"
        "t = torch.frombuffer(bytearray(raw[8 + n + a:8 + n + b]), dtype=torch.bfloat16)\n"
        "print(e['dtype'] + ''.join(' %.9g' % float(x) for x in t))\" " +
        path);
    REQUIRE(out == "BF16" + expect_b + "\n");
  } else {
    WARN("SKIPPED: the BF16 check (/usr/bin/python3 with torch is not available; tools/setup.sh --bench installs it)");
  }
}

TEST_CASE("PyPI's safetensors + numpy read our file with the same values (where installed)") {
  if (std::system("python3 -c 'import safetensors, numpy' >/dev/null 2>&1") != 0) {
    WARN(
        "SKIPPED: python3 with safetensors and numpy is not available (bash tools/setup.sh installs them); "
        "the independent reader above checked the layout");
    return;
  }
  const StateDict sd = sample();
  save_safetensors(tmp_path("c.safetensors"), sd);
  const std::string script = tmp_path("check.py");
  std::ofstream(script) << "import sys\nfrom safetensors.numpy import load_file\n"
                           "d = load_file(sys.argv[1])\n"
                           "for k in sorted(d):\n"
                           "    a = d[k]\n"
                           "    print(k, a.dtype, list(a.shape), ' '.join(repr(float(x)) for x in a.reshape(-1)))\n";
  FILE* p = popen(("python3 " + script + " " + tmp_path("c.safetensors")).c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  REQUIRE(pclose(p) == 0);
  INFO(out);
  REQUIRE(out.find("layer.bias float32 [3]") != std::string::npos);
  REQUIRE(out.find("steps int64 [2] 7.0 -1.0") != std::string::npos);
  REQUIRE(out.find("scalar float32 [] 2.5") != std::string::npos);
  REQUIRE(out.find("empty float32 [0, 5]") != std::string::npos);
  // The transposed view was written in its logical (row-major) order.
  REQUIRE(out.find("strided float32 [4, 3] 0.0 4.0 8.0 1.0 5.0 9.0 2.0 6.0 10.0 3.0 7.0 11.0") != std::string::npos);
  // Random values: Python's repr of each float32 (as a double) equals ours, digit for digit.
  std::string expect = "layer.weight float32 [3, 4]";
  for (float v : sd.at("layer.weight").to_vector<float>()) {
    char buf[64];
    std::snprintf(buf, sizeof buf, " %.17g", double(v));
    expect += buf;
  }
  FILE* r = popen(("python3 -c \"import sys; print(' '.join(repr(float(x)) for x in sys.argv[1:]))\"" +
                   expect.substr(expect.find(']') + 1))
                      .c_str(),
                  "r");
  REQUIRE(r != nullptr);
  std::string reprs;
  while (size_t n = fread(buf, 1, sizeof buf, r)) reprs.append(buf, n);
  pclose(r);
  while (!reprs.empty() && reprs.back() == '\n') reprs.pop_back();
  REQUIRE(out.find("layer.weight float32 [3, 4] " + reprs + "\n") != std::string::npos);
}

TEST_CASE("check_save_path names a missing folder or a folder given as the file, before any saving") {
  const std::string good = tmp_path("check_save.safetensors");
  check_save_path(good);  // the test's temporary folder: fine, and nothing is created
  REQUIRE_FALSE(std::ifstream(good).good());
  const std::string missing = tmp_path("no_such_folder") + "/x.safetensors";
  REQUIRE_THROWS_WITH(check_save_path(missing),
                      Catch::Contains("[save_safetensors] cannot save to " + missing + ": the folder") &&
                          Catch::Contains("no_such_folder does not exist"));
  const std::string folder = tmp_path("");
  REQUIRE_THROWS_WITH(check_save_path(folder), Catch::Contains("it is a folder"));
  REQUIRE_THROWS_WITH(check_save_path(""), Catch::Contains("the checkpoint path is empty"));
  // What it promises: save_safetensors fails on the same path, with the same words, before
  // writing anything (a folder given as the path used to be written beside, then refused).
  REQUIRE_THROWS(save_safetensors(missing, {{"w", zeros({2})}}));
  REQUIRE_THROWS_WITH(save_safetensors(folder, {{"w", zeros({2})}}), Catch::Contains("it is a folder"));
  REQUIRE_THROWS_WITH(save_safetensors("", {{"w", zeros({2})}}), Catch::Contains("the checkpoint path is empty"));
}

TEST_CASE("a device or a named pipe at the path is refused, not replaced by the save") {
  // `--checkpoint /dev/null`, the usual way to ask for no output: run as root, the save
  // renamed its file onto /dev/null, and /dev/null was a 2 MB regular file for every
  // program on the machine. Checked here on the real /dev/null without saving, and saved
  // only onto a device node and a FIFO of the test's own.
  REQUIRE_THROWS_WITH(check_save_path("/dev/null"),
                      Catch::Contains("cannot save to /dev/null: it is a device, not a file, and a save would put a "
                                      "file in its place"));
  const std::string fifo = tmp_path("save_fifo"), node = tmp_path("save_null");
  unlink(fifo.c_str()), unlink(node.c_str());
  REQUIRE(mkfifo(fifo.c_str(), 0644) == 0);
  REQUIRE_THROWS_WITH(save_safetensors(fifo, {{"w", zeros({2})}}),
                      Catch::Contains("cannot save to " + fifo + ": it is a named pipe (FIFO), not a file"));
  struct stat st {};
  CHECK((lstat(fifo.c_str(), &st) == 0 && S_ISFIFO(st.st_mode)));  // still the pipe
  if (mknod(node.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) {
    WARN("SKIPPED the device node of its own: mknod failed (" << std::strerror(errno) << "); needs root");
    return;
  }
  REQUIRE_THROWS_WITH(save_safetensors(node, {{"w", zeros({2})}}),
                      Catch::Contains("cannot save to " + node + ": it is a device, not a file"));
  CHECK((lstat(node.c_str(), &st) == 0 && S_ISCHR(st.st_mode)));  // still the device
}

TEST_CASE("check_distinct_save_paths refuses one file given for two saves, however the path is written") {
  namespace fs = std::filesystem;
  const std::string dir = tmp_path("distinct"), x = dir + "/x.st";
  fs::create_directories(dir + "/sub");
  fs::remove(dir + "/here"), fs::remove(dir + "/link.st"), fs::remove(dir + "/hard.st");
  fs::create_directory_symlink(".", dir + "/here");
  auto refused = [](const std::string& a, const std::string& b) {
    try {
      check_distinct_save_paths(a, "--state", b, "--checkpoint");
    } catch (const Error& e) {
      return std::string(e.what()).find("--state and --checkpoint both name " + a) != std::string::npos;
    }
    return false;
  };
  CHECK(refused(x, x));
  CHECK(refused(x, dir + "/./x.st"));
  CHECK(refused(x, dir + "/sub/../x.st"));
  CHECK(refused(x, dir + "/here/x.st"));  // through a linked folder
  const std::string cwd = fs::current_path();
  fs::current_path(dir);
  CHECK(refused("x.st", x));  // relative and absolute
  fs::current_path(cwd);
  CHECK_FALSE(refused(x, dir + "/y.st"));
  CHECK_FALSE(refused(x, dir + "/sub/x.st"));
  // A link or a hard link at the name is replaced by a save, not written through: two files.
  std::ofstream(x) << "state";
  fs::create_symlink("x.st", dir + "/link.st");
  fs::create_hard_link(x, dir + "/hard.st");
  CHECK_FALSE(refused(x, dir + "/link.st"));
  CHECK_FALSE(refused(x, dir + "/hard.st"));
  save_safetensors(dir + "/link.st", {{"w", zeros({2})}});
  std::ifstream kept(x);
  std::string text;
  kept >> text;
  CHECK(text == "state");  // the save replaced the link, and x.st is as it was
}

TEST_CASE("corrupt files are errors naming the file and the key, never a crash") {
  const std::string path = tmp_path("bad.safetensors");
  auto fails_with = [&](const std::string& bytes, const std::string& msg) {
    write_bytes(path, bytes);
    INFO("expecting: " << msg);
    REQUIRE_THROWS_WITH(load_safetensors(path), Catch::Contains(msg) && Catch::Contains("bad.safetensors"));
  };
  const std::string good_header = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string data(8, '\0');
  fails_with("abc", "too short");
  fails_with(safetensors_file(good_header, data).substr(0, 20), "declares a");                       // header cut
  fails_with(safetensors_file(good_header, data.substr(0, 4)), "run past the 4-byte data section");  // data cut
  fails_with(safetensors_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})", data), "malformed header");
  fails_with(safetensors_file(R"({"x":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}})", data + data),
             "dtype F64 is not supported (F32, I64, BF16 and F16 are)");
  fails_with(safetensors_file(R"({"x":{"dtype":"BF16","shape":[3],"data_offsets":[0,8]}})", data),
             "tensor \"x\": shape (3,) needs 6 bytes");
  fails_with(safetensors_file(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data),
             "tensor \"x\": shape (3,) needs 12 bytes");
  fails_with(safetensors_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", data), "0 <= begin <= end");
  fails_with(
      safetensors_file(
          R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"y":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
          data),
      "overlaps the previous tensor");
  fails_with(safetensors_file(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", data), "leaves a gap");
  fails_with(safetensors_file(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", data),
             "the data section has 8 bytes but the tensors cover 4");
  fails_with(safetensors_file(R"({"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data),
             "shape has an invalid size");
  fails_with(safetensors_file(R"({"x":{"dtype":"F32","shape":[2]}})", data), "needs dtype, shape and data_offsets");
  fails_with(safetensors_file(R"([1,2])", data), "not a JSON object");
  fails_with(safetensors_file(std::string(40, '[') + std::string(40, ']'), data), "nested too deeply");
  fails_with(safetensors_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}} trailing)", data),
             "malformed header at byte");
  std::string huge(8, '\xff');
  fails_with(huge + "{}", "declares a");
  // Every prefix of a good file fails cleanly (no crash, no out-of-range read).
  save_safetensors(path + ".good", sample());
  const std::string good = read_bytes(path + ".good");
  for (size_t cut = 0; cut < good.size(); cut += 7) {
    write_bytes(path, good.substr(0, cut));
    REQUIRE_THROWS_AS(load_safetensors(path), Error);
  }
  REQUIRE_THROWS_WITH(load_safetensors(tmp_path("nope.safetensors")),
                      Catch::Contains("cannot read " + tmp_path("nope.safetensors") + ": No such file"));
  const std::string folder = tmp_path("a_folder.safetensors");
  std::filesystem::create_directories(folder);
  REQUIRE_THROWS_WITH(load_safetensors(folder),
                      Catch::Contains("cannot read " + folder + ": it is a folder, not a file"));
}

TEST_CASE("many empty tensors, each starting where a full one does, load (and tile the data)") {
  // An empty tensor's bytes [b, b) begin where the next tensor's do: the loader must order
  // them by where they end too, whatever its sort does with ties (introsort past 16).
  StateDict sd;
  for (int i = 0; i < 40; ++i) {
    const std::string name = "t" + std::to_string(100 + i);
    sd[name] = i % 2 ? full({3}, float(i)) : zeros({0, 4});
  }
  save_safetensors(tmp_path("empties.safetensors"), sd);
  const StateDict back = load_safetensors(tmp_path("empties.safetensors"));
  REQUIRE(back.size() == sd.size());
  for (const auto& [k, t] : sd) {
    INFO(k);
    REQUIRE(back.at(k).shape() == t.shape());
    REQUIRE(back.at(k).to_vector<float>() == t.to_vector<float>());
  }
}

TEST_CASE("a model round-trips through a checkpoint; a mismatched one names the key") {
  Generator g1(1), g2(2);
  Linear a(4, 3, true, &g1), b(4, 3, true, &g2), c(5, 3, true, &g2);
  save_safetensors(tmp_path("model.safetensors"), a.state_dict());
  b.load_state_dict(load_safetensors(tmp_path("model.safetensors")));
  REQUIRE(b.weight.data().to_vector<float>() == a.weight.data().to_vector<float>());
  REQUIRE_THROWS_WITH(c.load_state_dict(load_safetensors(tmp_path("model.safetensors"))),
                      Catch::Contains("shape mismatch for \"weight\": checkpoint has (3,4), model has (3,5)"));
}

TEST_CASE("a failed save leaves the previous checkpoint intact and no temporary file") {
  const std::string path = tmp_path("keep.safetensors");
  save_safetensors(path, {{"v", tensor({1, 2, 3})}});
  const std::string before = read_bytes(path);
  REQUIRE_THROWS_WITH(save_safetensors(path, {{"a", tensor({1})}, {"b", Tensor()}}),
                      Catch::Contains("tensor \"b\" is undefined"));
  REQUIRE(read_bytes(path) == before);
  REQUIRE_THROWS_WITH(save_safetensors(tmp_path("no_such_dir/x.safetensors"), {{"v", tensor({1})}}),
                      Catch::Contains("no_such_dir does not exist; create it or choose another path"));
}

TEST_CASE("kill -9 during saves never leaves a half-written checkpoint") {
  const std::string path = tmp_path("crash.safetensors");
  save_safetensors(path, {{"v", full({1 << 22}, 1.0)}});  // 16 MiB of ones
  for (int trial = 0; trial < 3; ++trial) {
    const pid_t child = fork();
    if (child == 0) {
      // Keep overwriting the checkpoint with a new, equally large version.
      for (int i = 2;; ++i) save_safetensors(path, {{"v", full({1 << 22}, double(i))}});
    }
    usleep(useconds_t(60000 + 37000 * trial));
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    // Whatever moment the kill hit, the file is a complete checkpoint of one version.
    const StateDict sd = load_safetensors(path);
    const Tensor v = sd.at("v");
    REQUIRE(v.numel() == (1 << 22));
    REQUIRE(min(v).item() == max(v).item());
  }
}
