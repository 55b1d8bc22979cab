// Node ranks handed out at the rendezvous, as torchrun's c10d backend does: every machine's
// launcher is started with the same command (--rdzv_backend=c10d, no --node_rank). The one
// that can listen on --rdzv_endpoint (it runs on the machine with that address) serves a
// small store there for the job's lifetime, takes node rank 0 and picks the port rank 0
// will serve the ranks' own rendezvous on; the others take the lowest node rank no running
// launcher holds (1, 2, ... in the order they arrive), and read that port. A launcher holds
// its node rank for as long as its connection to that store lasts, so a machine that
// failed and is started again takes its node rank back and rejoins the job. When the
// endpoint's own machine fails and is started again, the others meet its new endpoint
// before their next restart (endpoint_serves), taking their node ranks back there.
//
//   auto keep = engine::dist::assign_node_rank(&args, std::chrono::seconds(300));
//   // args.node_rank and args.master_port are set; keep it until the job ends (node 0
//   // serves the store; the others hold their node rank through it)
#pragma once

#include <chrono>
#include <memory>

#include "dist/launch_args.h"
#include "dist/store.h"

namespace engine::dist {

// Sets args->node_rank and args->master_port (the port rank 0 will listen on; the endpoint's
// own port stays the launchers'). Returns the store (keep it alive: it serves the others on
// node 0 and holds the node rank elsewhere). Throws naming the endpoint when it is not
// reached in time, or when every node rank is held by a running launcher. `prefer`: the
// node rank to take back first, when it is free (a launcher meeting a new endpoint).
std::unique_ptr<TCPStore> assign_node_rank(LaunchArgs* args, std::chrono::milliseconds timeout, int prefer = -1);

// Whether a launcher's endpoint still serves it (answers within 5 s, so that one whose
// machine failed hard, closing nothing, counts as gone). It does not after the endpoint's
// machine failed: that machine's launcher, started again, serves a new one,
// with a new port for rank 0, which the others must read before they restart the job.
bool endpoint_serves(TCPStore& store);

}  // namespace engine::dist
