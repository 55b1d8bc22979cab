// The file:// rendezvous (init_method "file:///shared/path"): rank 0 serves the store and
// writes where it can be reached into the file; the other ranks read it there, on rank 0's
// machine or on another that shares the file system (an NFS home directory), as PyTorch's
// FileStore is used: no MASTER_ADDR needed.
//
//   std::string remove;  // rank 0: the file, removed when the group is destroyed
//   auto store = file_rendezvous("/nfs/job/rendezvous", rank, /*other_machines=*/true, options, &remove);
//
// The file, written to a temporary and renamed so that nobody reads half of it:
//
//   HOST:PORT           where rank 0's own machine connects: MASTER_ADDR, else 127.0.0.1
//                       (0.0.0.0, every interface, where other machines may take part)
//   network ID          rank 0's network (network_id()), where other machines may take part
//   address A           each address of rank 0's machine other machines may dial, one a line
//
// A rank in another network tries HOST where it is no loopback address there, then those
// addresses in turn, skipping any its own machine has too (a docker0 bridge's 172.17.0.1
// is on every machine): a wrong address fails fast or is refused at the handshake.
#pragma once

#include <memory>
#include <string>

#include "dist/store.h"

namespace engine::dist {

// Rank 0 serves and writes the file; the others read it until so.timeout, retrying while
// it is missing or points at a store that does not answer (a file left by an earlier run).
// other_machines: ranks may run on other machines (the launcher did not say they do not).
std::shared_ptr<TCPStore> file_rendezvous(const std::string& path, int rank, bool other_machines, StoreOptions so,
                                          std::string* remove);

}  // namespace engine::dist
