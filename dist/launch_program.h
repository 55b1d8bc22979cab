// The program the launcher runs on every rank, looked for once before any rank starts:
// a program that cannot run (a typo, a script without its execute bit, a .py file that
// torchrun would have given to python, a script whose interpreter is missing or written
// with Windows line endings) is said once, with what to do, instead of by every rank as
// "cannot run X: No such file or directory" about a file that is plainly there.
//
//   const std::string program = resolve_program(args.command[0]);
//   if (const Unrunnable u = why_not_runnable(program); u.status)
//     die("launch: cannot run " + program + ": " + u.why, u.status);
#pragma once

#include <string>

namespace engine::dist::launcher {

// A relative path with a '/' is looked up as given, then (under `bazel run`, whose working
// directory is the runfiles tree) in BUILD_WORKING_DIRECTORY; a bare name is left to PATH.
std::string resolve_program(const std::string& program);

struct Unrunnable {
  int status = 0;   // 0: it can run; else the shell's 127 (not found) or 126 (found, cannot run)
  std::string why;  // what is wrong, and what to do
};

// Whether `program` (a path, or a name looked up on PATH as execvp does) can be run.
Unrunnable why_not_runnable(const std::string& program);

}  // namespace engine::dist::launcher
