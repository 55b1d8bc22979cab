// The CPU backend's messages (tcp_group.h): a header, then its payload, sent and received
// side by side with poll(), every wait bounded by the deadline and by the link check, and
// the errors that name the peer, its machine and what it may be doing.
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "dist/process_state.h"
#include "dist/tcp_group.h"
#include "dist/tcp_wire.h"
#include "tensor/check.h"

namespace engine::dist {

using namespace wire;

void ProcessGroupTCP::check_header(const MessageHeader& got, const MessageHeader& expect, int from, Deadline d) {
  if (got.magic != kMagic)
    throw Error("[dist] " + peer_name(from) + " sent bytes that are not a message of this engine");
  if (got.kind == kAbort) {
    if (got.bytes > kMaxAbortText) throw Error("[dist] " + peer_name(from) + " aborted (message too long to show)");
    std::string text(got.bytes, '\0');
    peers_[from].recv_all(text.data(), text.size(), d, peer_name(from));
    throw Error(text + " [reported by " + peer_name(from) + "]");
  }
  const bool same = got.kind == expect.kind && got.seq == expect.seq && got.coll == expect.coll &&
                    got.op == expect.op && got.dtype == expect.dtype && got.count == expect.count &&
                    got.root == expect.root && got.step == expect.step && got.bytes == expect.bytes;
  if (!same)
    throw Error("[dist] mismatched collectives: rank " + std::to_string(rank_) + " called " + describe(expect) +
                " but " + peer_name(from) + " called " + describe(got) +
                "; every rank must make the same collective calls in the same order with the same "
                "op, dtype and element count");
}

void ProcessGroupTCP::raise_pending_abort(int busy) {
  // A connection failed. If some other rank failed first, it sent us an ABORT saying why
  // (a peer that died, say) before closing its connections: report that root cause
  // rather than the closed connection it led to. `busy` is a socket we may be in the
  // middle of reading, which cannot start with a header.
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || r == busy || !peers_[r].valid()) continue;
    MessageHeader h{};
    if (::recv(peers_[r].fd(), &h, sizeof h, MSG_PEEK | MSG_DONTWAIT) != ssize_t(sizeof h)) continue;
    if (h.magic != kMagic || h.kind != kAbort || h.bytes > kMaxAbortText) continue;
    ::recv(peers_[r].fd(), &h, sizeof h, MSG_DONTWAIT);
    std::string text(h.bytes, '\0');
    try {
      peers_[r].recv_all(text.data(), text.size(), deadline_in(std::chrono::milliseconds(200)), peer_name(r));
    } catch (const Error&) {
      continue;
    }
    throw Error(text + " [reported by " + peer_name(r) + "]");
  }
}

void ProcessGroupTCP::send_message(int to, const MessageHeader& header, const void* data, Deadline d) {
  const Outgoing out{to, header, data};
  transfer(&out, nullptr, d);
}

void ProcessGroupTCP::recv_message(int from, const MessageHeader& expect, void* data, Deadline d) {
  const Incoming in{from, expect, data};
  transfer(nullptr, &in, d);
}

bool ProcessGroupTCP::on_another_machine(int r) const {
  return machine_of_.size() == size_t(size_) && machine_of_[size_t(r)] != machine_of_[size_t(rank_)];
}

std::string ProcessGroupTCP::waiting_for(int r) const {
  const std::string causes = "it may be stuck, still computing, or in a different collective";
  if (!on_another_machine(r)) {  // then /proc may say why it does not answer: stopped, say
    const std::string state = state_words(peer_pid_.empty() ? 0 : peer_pid_[size_t(r)]);
    return peer_name(r) + (state.empty() ? ": " + causes : state);
  }
  const std::string& address = peer_address_[size_t(r)];
  return peer_name(r) + " on another machine" + (address.empty() ? "" : " (" + address + ")") + ": " + causes +
         ", or the network between the machines is down";
}

void ProcessGroupTCP::link_lost(int r, const MessageHeader& what) const {
  const std::string& address = peer_address_[size_t(r)];
  throw LinkLost("[dist] " + describe(what) + " on rank " + std::to_string(rank_) + ": " + peer_name(r) +
                 (on_another_machine(r) ? " on another machine" : "") + (address.empty() ? "" : " (" + address + ")") +
                 " has not answered at the network level for " + std::to_string(options_.link_timeout.count()) +
                 " s (ENGINE_LINK_TIMEOUT): its machine is down, or the network to it is (a process that is only "
                 "busy or stuck is still answered for by its machine)" +
                 jumbo_frames_note(peers_[size_t(r)].fd()));
}

void ProcessGroupTCP::send_recv(const Outgoing& out, const Incoming& in, Deadline d) { transfer(&out, &in, d); }

void ProcessGroupTCP::transfer(const Outgoing* out, const Incoming* in, Deadline d) {
  // Send side: header then payload, as one scatter-gather stream.
  size_t sent = 0;
  const size_t send_total = out ? sizeof(MessageHeader) + out->header.bytes : 0;
  // Receive side: first the header (checked before any payload is read), then the payload.
  MessageHeader got{};
  size_t got_header = in ? 0 : sizeof got, got_payload = 0, reported = 0;
  const size_t recv_total = in ? in->expect.bytes : 0;
  auto recv_done = [&] { return !in || (got_header == sizeof got && got_payload == recv_total); };

  const MessageHeader& what = in ? in->expect : out->header;
  // The link check: with nothing for a second, how long each peer's machine has left
  // something unanswered (link_silence_ms); grown past link_timeout on two looks, it is lost.
  const int64_t limit_ms = int64_t(options_.link_timeout.count()) * 1000;
  int64_t silent[2] = {0, 0};

  while (sent < send_total || !recv_done()) {
    pollfd p[2];
    int peer[2], n = 0, si = -1, ri = -1;
    if (sent < send_total) si = n, peer[n] = out->to, p[n++] = {peers_[out->to].fd(), POLLOUT, 0};
    if (!recv_done()) ri = n, peer[n] = in->from, p[n++] = {peers_[in->from].fd(), POLLIN, 0};
    const int r = ::poll(p, nfds_t(n), std::min(ms_until(d), 1000));
    if (r == 0 && Clock::now() < d) {  // a second of nothing, or a stop (stop_clock.h) the deadline outlasts
      for (int i = 0; i < n && limit_ms > 0; ++i) {
        const int64_t s = link_silence_ms(p[i].fd);
        if (s >= limit_ms && silent[i] >= limit_ms && s >= silent[i] + 500) link_lost(peer[i], what);
        silent[i] = s;
      }
      continue;
    }
    if (r == 0) {
      throw TimedOut("[dist] timed out after " + std::to_string(options_.timeout.count() / 1000) + " s in " +
                     describe(what) + " on rank " + std::to_string(rank_) + ", waiting for " +
                     waiting_for(!recv_done() ? in->from : out->to));
    }
    if (r < 0) {
      if (errno == EINTR) continue;
      throw Error(std::string("[dist] poll failed: ") + std::strerror(errno));
    }
    if (ri >= 0 && p[ri].revents) {
      const int fd = peers_[in->from].fd();
      ssize_t k;
      if (got_header < sizeof got) {
        k = ::recv(fd, reinterpret_cast<char*>(&got) + got_header, sizeof got - got_header, 0);
        if (k > 0 && (got_header += size_t(k)) == sizeof got) check_header(got, in->expect, in->from, d);
      } else {
        // In a window, bytes are received up to its end at most, and on_bytes is called there:
        // the window's end is a whole number of elements, so all it holds has been used and
        // the next bytes may start again at its beginning.
        const size_t at = in->window ? got_payload % in->window : got_payload;
        const size_t room = std::min(recv_total - got_payload, in->window ? in->window - at : SIZE_MAX);
        k = ::recv(fd, static_cast<char*>(in->data) + at, room, 0);
        if (k > 0) got_payload += size_t(k);
        const bool window_end = in->window && got_payload % in->window == 0;
        if (in->on_bytes && got_payload > reported &&
            (got_payload - reported >= options_.chunk_bytes || got_payload == recv_total || window_end)) {
          reported = got_payload;
          in->on_bytes(got_payload);
        }
      }
      if (k == 0) raise_pending_abort(in->from), throw_io_error("receiving from", peer_name(in->from), 0, false);
      if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        const int err = errno;
        raise_pending_abort(in->from);
        if (err == ETIMEDOUT) link_lost(in->from, what);  // keepalive probes went unanswered
        throw_io_error("receiving from", peer_name(in->from), err, false);
      }
    }
    if (si >= 0 && p[si].revents) {
      iovec iov[2];
      int cnt = 0;
      if (sent < sizeof(MessageHeader))
        iov[cnt++] = {reinterpret_cast<char*>(const_cast<MessageHeader*>(&out->header)) + sent,
                      sizeof(MessageHeader) - sent};
      const size_t payload_done = sent > sizeof(MessageHeader) ? sent - sizeof(MessageHeader) : 0;
      if (out->header.bytes > payload_done)
        iov[cnt++] = {const_cast<char*>(static_cast<const char*>(out->data)) + payload_done,
                      out->header.bytes - payload_done};
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = size_t(cnt);
      const ssize_t k = ::sendmsg(peers_[out->to].fd(), &msg, MSG_NOSIGNAL);
      if (k > 0)
        sent += size_t(k), bytes_sent_ += uint64_t(k);
      else if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        const int err = errno;
        raise_pending_abort(in ? in->from : -1);
        if (err == ETIMEDOUT) link_lost(out->to, what);
        throw_io_error("sending to", peer_name(out->to), err, false);
      }
    }
  }
}

}  // namespace engine::dist
