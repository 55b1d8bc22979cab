#include "dist/launch_program.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace engine::dist::launcher {

std::string resolve_program(const std::string& p) {
  if (p.find('/') == std::string::npos || p[0] == '/' || access(p.c_str(), X_OK) == 0) return p;
  if (const char* wd = std::getenv("BUILD_WORKING_DIRECTORY")) {
    const std::string q = std::string(wd) + "/" + p;
    if (access(q.c_str(), X_OK) == 0) return q;
  }
  return p;
}

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The file a bare name runs, found on PATH as execvp finds it; "" when none is.
std::string on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path && *path ? path : "/usr/local/bin:/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    struct stat st {};
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(candidate.c_str(), X_OK) == 0)
      return candidate;
  }
  return "";
}

// A script's "#!" line: the interpreter it names, where that is missing (a Windows line
// ending makes "/bin/bash\r" of "/bin/bash"). A binary, or a script whose interpreter is
// there, gives "".
std::string missing_interpreter(const std::string& file) {
  // Read only a regular file: opening a named pipe waits for a writer, for good.
  struct stat st {};
  if (stat(file.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return "it is not a regular file";
  std::ifstream in(file, std::ios::binary);
  std::string line;
  if (!std::getline(in, line) || line.rfind("#!", 0) != 0) return "";
  const size_t start = line.find_first_not_of(" \t", 2);
  if (start == std::string::npos) return "its first line, \"#!\", names no interpreter";
  const size_t end = line.find_first_of(" \t", start);
  const std::string interpreter = line.substr(start, end == std::string::npos ? std::string::npos : end - start);
  if (access(interpreter.c_str(), X_OK) == 0) return "";
  if (!interpreter.empty() && interpreter.back() == '\r')
    return "its first line ends with a carriage return (Windows line endings), so the interpreter it names is \"" +
           interpreter.substr(0, interpreter.size() - 1) + "\\r\", which does not exist: convert the file (dos2unix " +
           file + ", or sed -i 's/\\r$//' " + file + ")";
  return "its interpreter, " + interpreter + " (named on its first line, #!), does not exist here";
}

}  // namespace

Unrunnable why_not_runnable(const std::string& program) {
  const bool python = ends_with(program, ".py");
  const std::string torchrun =
      python ? "; torchrun runs a .py file with python, this launcher runs PROGRAM as it is: put the interpreter "
               "first (launch ... python3 " +
                   program + ")"
             : "";
  if (program.find('/') == std::string::npos) {
    const std::string found = on_path(program);
    if (found.empty()) {
      struct stat st {};
      const bool here = stat(program.c_str(), &st) == 0;
      return {127,
              "no program of that name on PATH" +
                  (here ? std::string(" (a file of that name is in this directory: give its path, ./") + program + ")"
                        : std::string()) +
                  torchrun};
    }
    const std::string interp = missing_interpreter(found);
    return interp.empty() ? Unrunnable{} : Unrunnable{126, found + ": " + interp};
  }
  struct stat st {};
  if (stat(program.c_str(), &st) != 0) return {127, "no such file"};
  if (S_ISDIR(st.st_mode)) return {126, "it is a directory"};
  if (access(program.c_str(), X_OK) != 0) return {126, "it is not executable (chmod +x " + program + ")" + torchrun};
  const std::string interp = missing_interpreter(program);
  return interp.empty() ? Unrunnable{} : Unrunnable{126, interp};
}

}  // namespace engine::dist::launcher
