// What a rank tells the launcher that started it: that it has entered init_process_group
// (for a group of how many ranks) and that it has joined. With that the launcher sees a
// rank that ended without ever joining while a rank of its machine waits for it in
// init_process_group, and ends the job at once, naming both (launch_watch.h; ranks of other
// machines are told through rank 0's store); without it the waiting ranks would sit out the
// rendezvous timeout (300 s by default), saying only that a rank has not connected.
//
//   // in a rank (dist.cc): nothing happens when no launcher left a notice pipe
//   notify_launcher("init " + std::to_string(rank) + " " + std::to_string(world));
//   notify_launcher("joined");
//
//   // in the launcher, for each rank it starts (launch.cc, launch_watch.cc)
//   NoticePipe pipe = open_notice_pipe();      // the child keeps pipe.write_fd and
//   setenv(kNoticeFdVariable, pipe.variable.c_str(), 1);  // finds it by this variable
//   RankNotices n;  n.fd = pipe.read_fd;
//   read_notices(n);                             // whenever poll() says it is readable
#pragma once

#include <string>

namespace engine::dist {

// "FD:INODE": the notice pipe's descriptor in the rank, and the pipe's inode, so that a
// program that inherited the variable but not the descriptor (a rank's own subprocess)
// never writes into a pipe of its own that happens to have that number.
inline constexpr const char* kNoticeFdVariable = "ENGINE_LAUNCH_NOTICE_FD";

// Writes one line to the launcher's notice pipe, if this process was given one. Never
// blocks (the launcher made the pipe non-blocking; a full pipe loses the line) and never
// throws; a variable that names no such pipe is warned of once and ignored.
void notify_launcher(const std::string& line);

// The launcher's side.
struct NoticePipe {
  int read_fd = -1, write_fd = -1;
  std::string variable;  // the value of kNoticeFdVariable for the child
};
// Both ends close on exec; the child clears that on write_fd before it runs the program.
// Where pipe() fails: both fds -1, and errno says why.
NoticePipe open_notice_pipe();

// What one rank has said so far.
struct RankNotices {
  int fd = -1;          // the read end; -1 once the rank's end has closed
  std::string partial;  // a line not yet ended
  int init_world = 0;   // the world size of the init_process_group it entered (0: none yet)
  bool joined = false;  // that init_process_group returned
};
// Reads what is there (the fd is non-blocking) and applies each whole line; a line that is
// not a notice is ignored. Closes the fd at end of file.
void read_notices(RankNotices& n);

}  // namespace engine::dist
