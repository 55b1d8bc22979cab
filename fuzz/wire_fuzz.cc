// Fuzzes the CPU backend's wire protocol as a peer would: rank 0 of a 2-rank group runs an
// all-reduce while a fake rank 1 connects with a valid hello and then sends the input as
// its side of the conversation (message headers, abort notices, payloads), then closes.
// Rank 0 must finish the collective or fail it with engine::Error, promptly, never crash.
#include <sys/socket.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "dist/socket.h"
#include "dist/store.h"
#include "dist/tcp_group.h"
#include "tensor/ops.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace engine::dist;
  // One store for the whole run (a new one per input would cost its threads' start and
  // stop); rank 0's keys are deleted after each input, so the next fake rank 1 waits for
  // the new ones.
  static std::shared_ptr<TCPStore> store = [] {
    StoreOptions so;
    so.token = "fuzz";
    so.timeout = std::chrono::seconds(5);
    return std::make_shared<TCPStore>("127.0.0.1", 0, true, so);
  }();
  std::thread rank0([&] {
    try {
      TCPGroupOptions go;
      go.token = "fuzz";
      go.timeout = std::chrono::seconds(5);
      go.shared_memory = false;
      ProcessGroupTCP g(store, 0, 2, go);
      engine::Tensor t = engine::full({16}, 1.0);
      g.all_reduce(t).wait();
    } catch (const engine::Error&) {}
  });
  try {
    // Rank 1's side: its host name for rank 0's topology discovery (another machine: the
    // ring, the path whose messages the input imitates) and rank 0's network as its own
    // (rank 0 would otherwise wait for it to choose the address it listens on), then find
    // rank 0 through the store and say hello with the job's token.
    store->set("topo/host/1", "fuzz-peer");
    store->set("tcp/network/1", store->get("tcp/network/0"));
    const std::string addr = store->get("tcp/addr/0");
    const size_t colon = addr.rfind(':');
    Socket s = Socket::connect(addr.substr(0, colon), std::stoi(addr.substr(colon + 1)),
                               deadline_in(std::chrono::seconds(2)), "rank 0");
    struct {
      uint32_t magic = 0x44445044;
      int32_t rank = 1;
      uint32_t token_len = 4;
    } hello;
    s.send_all(&hello, sizeof hello, deadline_in(std::chrono::seconds(2)), "rank 0");
    s.send_all("fuzz", 4, deadline_in(std::chrono::seconds(2)), "rank 0");
    // Rank 0 then checks that every rank asked for the same all-reduce: say what it says.
    store->set("topo/setting/1", store->get("topo/setting/0"));
    s.send_all(data, size, deadline_in(std::chrono::seconds(2)), "rank 0");
    ::shutdown(s.fd(), SHUT_WR);
    char buf[4096];
    const Deadline d = deadline_in(std::chrono::seconds(2));
    while (wait_fd(s.fd(), false, d) && ::recv(s.fd(), buf, sizeof buf, 0) > 0) {}
  } catch (const engine::Error&) {}
  rank0.join();
  for (const char* key : {"tcp/addr/0", "tcp/network/0", "topo/host/0", "topo/setting/0"}) store->delete_key(key);
  return 0;
}
