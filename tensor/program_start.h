// What every program of the engine sets up before main() runs, whoever started it and how:
// things a parent passes on through exec that would otherwise turn a plain mistake into a
// lost run. Nothing to call: a program linked with //tensor:program_start (every program
// linked with //tensor) has all three done at its start. The calls are here for tests.
//
// 1. Fds 0, 1 and 2 (stdin, stdout, stderr) are open. A program started with one of them
//    closed (`launch ... <&- >&-`, a script or service manager that closed its own) hands
//    that number to the next file, pipe or socket it opens, and whatever it then prints
//    goes there: into a lock file, a checkpoint being written, a collective's connection.
//    The launcher's first pipe took fd 1 that way, so the ranks' output went into the pipe
//    its SIGCHLD handler reports exits through, and once that was full the launcher blocked
//    writing to it for good. So (as OpenSSH's sanitise_stdfd() does, and the BSDs' C
//    libraries for set-user-ID programs) each that is closed is opened on /dev/null; what
//    is printed there is lost, as it would have been.
// 2. A write past the file-size limit (ulimit -f; some clusters and schedulers set one)
//    fails with EFBIG, which a save reports, naming the limit, and the last checkpoint is
//    kept. By default the kernel kills the process there with SIGXFSZ: a run ended without
//    a word, its checkpoint's temporary half written. Python ignores SIGXFSZ for the same
//    reason. (The launcher gives it back its default in what it starts, as it does SIGPIPE.)
//
// 3. Output that could not be written is said at exit, not lost in silence. A run whose
//    output went to a full disk (`train > results.txt`), or to anything else that fails,
//    trained, saved and exited 0 with its results file empty or cut short: a script that
//    checks the status saw success. At exit, if a write to stdout failed, the program says
//    so on stderr, naming the reason (`train: writing to standard output failed: No space
//    left on device; what it printed there is incomplete`), and a status of 0 becomes 1
//    (as coreutils' close_stdout does; any other status is kept). A reader that closed its
//    pipe (`| head`) is not a failure: the output was not wanted, as for a program that
//    SIGPIPE ends.
//
//   const int reopened = engine::open_closed_standard_fds();  // bit k: fd k was closed
//   engine::fail_writes_past_file_size_limit();
//   engine::report_failed_output_at_exit();
#pragma once

namespace engine {

// Opens /dev/null (or, where there is none, the root folder, read-only: writes to it fail)
// at each of fds 0, 1 and 2 that is closed. Returns a bit mask of those it opened; fds it
// could not open stay closed (the process is out of file descriptors).
int open_closed_standard_fds();

// Sets SIGXFSZ to be ignored (a program starts with it at its default or ignored: exec
// resets handlers).
void fail_writes_past_file_size_limit();

// Registers the check of 3. (once; later calls do nothing).
void report_failed_output_at_exit();

}  // namespace engine
