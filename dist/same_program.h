// Whether every rank runs the same build of its program: a fingerprint of this process's
// executable (/proc/self/exe), compared at the rendezvous. A machine left with an older
// build (the code changed and was rebuilt on one machine only) computes other gradients,
// and DDP averages whatever it is sent: the job would train on, silently, a mix of two
// programs. Said as a warning (builds made apart from the same code may differ by a byte).
//
//   const std::string mine = program_fingerprint();   // "5397064:9c1e0f2a77d3b410", "" if unreadable
//   if (!mine.empty() && !theirs.empty() && mine != theirs) ...  // say which rank runs what
#pragma once

#include <string>

namespace engine::dist {

// "SIZE:HASH" of /proc/self/exe (64 bits over its bytes; ~3 ms for 5 MB), computed once;
// "" where it cannot be read.
const std::string& program_fingerprint();

// "/path/prog, 5,397,064 bytes (fingerprint 9c1e0f2a77d3b410)" for a fingerprint.
std::string describe_program(const std::string& path, const std::string& fingerprint);

// This process's executable's path ("" where /proc is missing).
std::string program_path();

}  // namespace engine::dist
