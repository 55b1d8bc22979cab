// Keeps file descriptors 0, 1 and 2 (stdin, stdout, stderr) open in every program.
//
// A program started with one of them closed (`launch ... <&- >&-`, a service manager or a
// script that closed its own before starting it) hands that number to the next file, pipe
// or socket it opens, and whatever it then prints goes there: into a lock file, a
// checkpoint being written, a collective's connection. The launcher's own pipe took fd 1
// that way, so the ranks' output went into the pipe its SIGCHLD handler reports exits
// through: read back as exits, then, once the pipe was full, the launcher blocked writing
// to it for good. So (as OpenSSH's sanitise_stdfd() does, and the BSDs' C libraries for
// set-user-ID programs) each of the three that is closed is opened on /dev/null before
// main() runs; what is printed there is lost, as it would have been, and nothing else is
// touched.
//
//   // nothing to call: a program linked with //tensor:standard_fds (every program linked
//   // with //tensor) has it done before main(); the call is here for tests and for
//   // programs that close them on purpose and open files afterwards.
//   const int reopened = engine::open_closed_standard_fds();  // bit k: fd k was closed
#pragma once

namespace engine {

// Opens /dev/null (or, where there is none, the root folder, read-only: writes to it fail)
// at each of fds 0, 1 and 2 that is closed. Returns a bit mask of those it opened; fds it
// could not open stay closed (the process is out of file descriptors).
int open_closed_standard_fds();

}  // namespace engine
