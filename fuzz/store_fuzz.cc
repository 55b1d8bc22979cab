// Fuzzes the rendezvous store's server with whatever a client could send: each input is
// the whole byte stream of one connection (handshake included; the seeds start with a
// valid one). The server must drop bad clients and keep serving good ones: every 32
// inputs a real client checks that it still answers.
#include <sys/socket.h>

#include <cstdlib>
#include <memory>

#include "dist/socket.h"
#include "dist/store.h"
#include "tensor/check.h"

namespace {

engine::dist::TCPStore& server() {
  static std::unique_ptr<engine::dist::TCPStore> s = [] {
    engine::dist::StoreOptions o;
    o.token = "fuzz-token";
    o.timeout = std::chrono::seconds(5);
    return std::make_unique<engine::dist::TCPStore>("127.0.0.1", 0, true, o);
  }();
  return *s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace engine::dist;
  TCPStore& store = server();
  try {
    Socket s = Socket::connect("127.0.0.1", store.port(), deadline_in(std::chrono::seconds(2)), "the store");
    s.send_all(data, size, deadline_in(std::chrono::seconds(2)), "the store");
    ::shutdown(s.fd(), SHUT_WR);  // no more requests: the server answers what it got, then sees the end
    char buf[4096];
    const Deadline d = deadline_in(std::chrono::milliseconds(500));
    while (wait_fd(s.fd(), false, d) && ::recv(s.fd(), buf, sizeof buf, 0) > 0) {}
  } catch (const engine::Error&) {}
  static int n = 0;
  if (++n % 32 == 0) {  // still serving?
    store.set("fuzz/alive", std::to_string(n));
    if (store.get("fuzz/alive") != std::to_string(n)) std::abort();
  }
  return 0;
}
