// Fuzzes the rendezvous of a rank's own listener as a stranger would: rank 0 of a 2-rank
// group waits for rank 1 while a stranger connects first and sends the input (a partial,
// wrong or garbage hello, or anything at all) and stays connected. Then the real rank 1
// arrives. Whatever the stranger sent, the group must form and all-reduce at once (the
// stranger is dropped or left waiting, never waited on); anything else aborts. The job's
// token is a secret the stranger cannot guess (one who knows it is a member of the job).
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "dist/socket.h"
#include "dist/store.h"
#include "dist/tcp_group.h"
#include "tensor/ops.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace engine::dist;
  static const std::string token =
      "secret-" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
  static std::shared_ptr<TCPStore> store = [] {
    StoreOptions so;
    so.token = token;
    so.timeout = std::chrono::seconds(10);
    return std::make_shared<TCPStore>("127.0.0.1", 0, true, so);
  }();
  static int round = 0;
  TCPGroupOptions go;
  go.token = token;
  go.timeout = std::chrono::seconds(10);
  go.shared_memory = false;
  go.key_prefix = "round" + std::to_string(round++) + "/";  // each input a fresh rendezvous
  const auto start = std::chrono::steady_clock::now();
  double sums[2] = {0, 0};
  auto rank = [&](int r) {
    try {
      ProcessGroupTCP g(store, r, 2, go);
      engine::Tensor t = engine::full({4}, 1.0);
      g.all_reduce(t).wait();
      sums[r] = t.to_vector<float>()[3];
    } catch (const engine::Error&) {}
  };
  std::thread rank0(rank, 0);
  Socket stranger;
  try {
    const std::string addr = store->get(go.key_prefix + "tcp/addr/0");
    const size_t colon = addr.rfind(':');
    stranger = Socket::connect(addr.substr(0, colon), std::stoi(addr.substr(colon + 1)),
                               deadline_in(std::chrono::seconds(2)), "rank 0");
    if (size) stranger.send_all(data, size, deadline_in(std::chrono::seconds(2)), "rank 0");
  } catch (const engine::Error&) {  // rank 0 may drop it while it is still sending
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the stranger is first in line
  std::thread rank1(rank, 1);
  rank0.join(), rank1.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (sums[0] != 2 || sums[1] != 2 || seconds > 5) std::abort();  // the stranger held up the group
  return 0;
}
