// The fault-injection matrix (docs/RELIABILITY.md): three processes train a small model
// with DDP and checkpoint from rank 0; one of them is killed (SIGKILL) or frozen (SIGSTOP)
// at a chosen phase. For every cell: what each survivor does and after how many seconds,
// and that the checkpoint on disk is always a whole one (the previous or the new).
//
// Survivors are not stopped by a launcher here: what is measured is what the engine
// itself does. The group's timeout is 3 s, so a frozen peer is noticed within that.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "catch2/catch.hpp"
#include "dist/ddp.h"
#include "dist/socket.h"
#include "dist/tcp_group.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/safetensors.h"
#include "nn/sgd.h"
#include "tensor/ops.h"
#include "tests/testing/held_port.h"
#include "tests/testing/tmp_path.h"

using engine::testing::tmp_path;

using namespace engine;
using namespace engine::dist;
using namespace engine::nn;

namespace {

enum class Phase { Rendezvous, Forward, AllReduce, CheckpointSave, Destroy };
const char* name(Phase p) {
  switch (p) {
    case Phase::Rendezvous: return "rendezvous";
    case Phase::Forward: return "forward";
    case Phase::AllReduce: return "inside an all-reduce";
    case Phase::CheckpointSave: return "checkpoint save";
    case Phase::Destroy: return "destroy_process_group";
  }
  return "?";
}

constexpr int kWorld = 3;

struct Cell {
  Phase phase;
  int signal;  // SIGKILL or SIGSTOP
};

[[noreturn]] void fault(int sig) {
  raise(sig);
  // A stopped process resumes here only if someone sends SIGCONT; the test kills it instead.
  _exit(99);
}

// One rank's run. Writes "ok" or the error to `fd`; returns the exit code.
int run_rank(int rank, int fd, int port, const Cell& cell, int faulty, const std::string& ckpt) {
  auto say = [&](const std::string& s) { (void)!write(fd, s.data(), s.size()); };
  try {
    if (cell.phase == Phase::Rendezvous && rank == faulty) fault(cell.signal);
    StoreOptions so;
    so.timeout = std::chrono::seconds(3);
    auto store = std::make_shared<TCPStore>("127.0.0.1", port, rank == 0, so);
    TCPGroupOptions go;
    go.timeout = std::chrono::seconds(3);
    ProcessGroupTCP group(store, rank, kWorld, go);

    Generator g(7);
    auto model = std::make_shared<Sequential>(std::vector<ModulePtr>{std::make_shared<Linear>(64, 64, true, &g),
                                                                     std::make_shared<ReLU>(),
                                                                     std::make_shared<Linear>(64, 8, true, &g)});
    DistributedDataParallel ddp(model, {.bucket_cap_mb = 0.001, .first_bucket_mb = 0.001, .group = &group});
    SGD opt(ddp.parameters(), {.lr = 0.1});
    if (cell.phase == Phase::AllReduce && rank == faulty)  // the last layer's gradient is the first ready:
      model->parameters()[2].register_post_accumulate_grad_hook([&](Variable&) {  // its bucket is in flight
        static int calls = 0;
        if (++calls == 3) fault(cell.signal);
      });
    // A large state, so that a save takes long enough to be interrupted.
    StateDict state;
    for (int step = 0; step < 5; ++step) {
      Generator data(uint64_t(100 * step + rank));
      const Tensor x = randn({16, 64}, &data), y = randint(0, 8, {16}, &data);
      if (cell.phase == Phase::Forward && rank == faulty && step == 2) fault(cell.signal);
      opt.zero_grad();
      cross_entropy(ddp(Variable(x)), y).backward();
      opt.step();
      if (step == 1 || step == 3) {  // checkpoints: the first whole, the second maybe interrupted
        state = ddp.module().state_dict();
        state["step"] = full({1}, double(step));
        state["padding"] = full({int64_t(16) << 20}, double(step));  // 64 MB
        if (cell.phase == Phase::CheckpointSave && rank == faulty && step == 3)
          std::thread([sig = cell.signal] {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            raise(sig);
          }).detach();
        save_on_rank0(ckpt, state, &group);
      }
    }
    if (cell.phase == Phase::Destroy) {
      // destroy_process_group: the group goes away on every rank (no collective), and the
      // faulty rank dies in the middle of it. The others must still leave promptly.
      if (rank == faulty) fault(cell.signal);
      say("ok");
      return 0;  // ~ProcessGroupTCP, ~TCPStore: the same as destroy_process_group()
    }
    group.barrier().wait();
    say("ok");
    return 0;
  } catch (const std::exception& e) {
    say(e.what());
    return 1;
  }
}

struct Outcome {
  int exit_code;
  double seconds;  // from the start until it exited
  std::string message;
};

std::vector<Outcome> run_cell(const Cell& cell, int faulty, const std::string& ckpt) {
  const int port = engine::testing::held_port();  // rank 0 listens on it
  std::vector<pid_t> pids;
  std::vector<int> fds;
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < kWorld; ++r) {
    int p[2];
    REQUIRE(pipe(p) == 0);
    const pid_t pid = fork();
    if (pid == 0) {
      close(p[0]);
      _exit(run_rank(r, p[1], port, cell, faulty, ckpt));
    }
    close(p[1]);
    pids.push_back(pid);
    fds.push_back(p[0]);
  }
  std::vector<Outcome> out(static_cast<size_t>(kWorld));
  for (int r = 0; r < kWorld; ++r) {
    if (r == faulty) continue;
    int status = 0;
    // No survivor may hang: after 30 s it is killed and the cell fails below.
    while (waitpid(pids[size_t(r)], &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() - start > std::chrono::seconds(30)) kill(pids[size_t(r)], SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    out[size_t(r)].seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    out[size_t(r)].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  }
  kill(pids[size_t(faulty)], SIGKILL);  // a stopped rank stays stopped until killed
  int status = 0;
  waitpid(pids[size_t(faulty)], &status, 0);
  out[size_t(faulty)].exit_code = -WTERMSIG(status);
  for (int r = 0; r < kWorld; ++r) {
    char buf[4096];
    ssize_t n;
    while ((n = read(fds[size_t(r)], buf, sizeof buf)) > 0) out[size_t(r)].message.append(buf, size_t(n));
    close(fds[size_t(r)]);
  }
  return out;
}

}  // namespace

TEST_CASE("fault matrix: kill -9 or SIGSTOP of rank 0 or rank 1 at every phase") {
  const std::string dir = tmp_path("");
  std::printf("| phase | fault | rank | survivors: exit, seconds | what the survivors said | checkpoint |\n");
  std::printf("| --- | --- | --- | --- | --- | --- |\n");
  for (Phase phase : {Phase::Rendezvous, Phase::Forward, Phase::AllReduce, Phase::CheckpointSave, Phase::Destroy})
    for (int faulty : {0, 1})  // rank 0 also serves the store; rank 1 is any other rank
      for (int sig : {SIGKILL, SIGSTOP}) {
        if (phase == Phase::CheckpointSave && faulty != 0) continue;  // only rank 0 writes the checkpoint
        const std::string ckpt = dir + "fault_ckpt.safetensors";
        std::filesystem::remove(ckpt);
        const Cell cell{phase, sig};
        const auto out = run_cell(cell, faulty, ckpt);
        INFO("phase " << name(phase) << ", " << (sig == SIGKILL ? "SIGKILL" : "SIGSTOP") << " of rank " << faulty);
        std::string survivors, said;
        for (int r = 0; r < kWorld; ++r) {
          if (r == faulty) continue;
          const Outcome& o = out[size_t(r)];
          INFO("rank " << r << " exit " << o.exit_code << " after " << o.seconds << " s: " << o.message);
          char b[64];
          std::snprintf(b, sizeof b, "%s%d, %.1f s", survivors.empty() ? "" : "; ", o.exit_code, o.seconds);
          survivors += b;
          if (said.empty() && o.exit_code != 0) said = o.message.substr(0, 150);
          CHECK(o.seconds < 20);    // nobody hangs: every survivor is done well within the limit
          CHECK(o.exit_code >= 0);  // and it ended by itself (not killed by the 30 s guard)
          if (phase == Phase::Destroy) {
            CHECK(o.exit_code == 0);  // leaving needs nobody else
          } else {                    // a failure before the end is reported, naming the cause
            CHECK(o.exit_code == 1);
            CHECK((o.message.find("rank " + std::to_string(faulty)) != std::string::npos ||
                   o.message.find("timed out") != std::string::npos));
          }
        }
        // The checkpoint on disk is always a whole one: absent, or it loads.
        std::string ck = "none";
        if (std::filesystem::exists(ckpt)) {
          StateDict sd;
          REQUIRE_NOTHROW(sd = load_safetensors(ckpt));
          ck = "whole, from step " + std::to_string(int(sd.at("step").item()));
        }
        // A writer killed mid-save leaves its temporary (never a half-written checkpoint);
        // the next save clears it away.
        auto temporaries = [&] {
          int n = 0;
          for (const auto& e : std::filesystem::directory_iterator(dir))
            n += e.path().filename().string().rfind("fault_ckpt.safetensors.tmp.", 0) == 0;
          return n;
        };
        const int left = temporaries();
        if (phase != Phase::CheckpointSave) CHECK(left == 0);
        if (left) ck += ", plus the interrupted writer's temporary (the next save clears it)";
        save_safetensors(ckpt, {{"step", full({1}, 9.0)}});
        CHECK(temporaries() == 0);
        std::printf("| %s | %s | %d | %s | %s | %s |\n", name(phase), sig == SIGKILL ? "kill -9" : "SIGSTOP", faulty,
                    survivors.c_str(), said.empty() ? "(finished normally)" : said.c_str(), ck.c_str());
        std::fflush(stdout);
      }
}
