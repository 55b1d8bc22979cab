// Node ranks handed out at the rendezvous, as torchrun's c10d backend does: every machine's
// launcher is started with the same command (--rdzv_backend=c10d, no --node_rank). The one
// that can listen on --rdzv_endpoint (it runs on the machine with that address) serves a
// small store there for the job's lifetime, takes node rank 0 and picks the port rank 0
// will serve the ranks' own rendezvous on; the others get node ranks 1, 2, ... in the order
// they arrive, and read that port.
//
//   auto keep = engine::dist::assign_node_rank(&args, std::chrono::seconds(300));
//   // args.node_rank and args.master_port are set; keep (on node 0) serves until the job ends
#pragma once

#include <chrono>
#include <memory>

#include "dist/launch_args.h"
#include "dist/store.h"

namespace engine::dist {

// Sets args->node_rank and args->master_port (the port rank 0 will listen on; the endpoint's
// own port stays the launchers'). Returns the store on the launcher that serves it (keep it
// alive), null on the others. Throws naming the endpoint when it is not reached in time,
// or when more launchers join than --nnodes.
std::unique_ptr<TCPStore> assign_node_rank(LaunchArgs* args, std::chrono::milliseconds timeout);

}  // namespace engine::dist
