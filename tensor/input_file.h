// A file a program is given to read (a checkpoint, a dataset file, an image, a rendezvous
// file) is looked at before it is opened. Opening a named pipe (FIFO) for reading waits for
// a writer with no timeout, and SIGTERM cannot end that wait (the stop handlers let the call
// restart); a device such as /dev/zero never ends. Neither blocks here: each is named. A
// file a program saves is renamed onto its name, so what is there is looked at too: a device
// (`--checkpoint /dev/null`) would be replaced for every program on the machine.
//
//   const std::string why = engine::not_a_file(path);  // "" for a regular file it can open
//   if (!why.empty()) throw engine::Error("[load_safetensors] cannot read " + path + why);
//                     // e.g. "... cannot read ck: it is a named pipe (FIFO), not a file"
//   if (engine::anything_at(path)) resume_from(path);  // missing: start afresh
//   if (!engine::special_file_at(path).empty()) ...     // "a device": refuse to save there
#pragma once

#include <string>

namespace engine {

// "" where path is a regular file this process can open for reading; otherwise why not,
// worded to follow "cannot read PATH": ": it is a folder, not a file", ": it is a named pipe
// (FIFO), not a file", ": No such file or directory", ": Permission denied". Never blocks.
std::string not_a_file(const std::string& path);

// Whether there is anything at path: a file, a folder, a FIFO, or a name that cannot be
// looked at (a folder on the way this process may not search). Only a missing name (or a
// link to one) is nothing. For "resume if there is a checkpoint": whatever is there is then
// opened or refused by name, never taken for "no checkpoint yet" and saved over. Never blocks.
bool anything_at(const std::string& path);

// What is at path where a writer must not put a file in its place: "a device", "a named pipe
// (FIFO)", "a socket" or "a folder"; "" for nothing, a regular file or a link (the name
// itself is looked at, not followed: a save replaces a link). A save renames its file onto
// the name, so `--checkpoint /dev/null` had made /dev/null a regular file.
std::string special_file_at(const std::string& path);

}  // namespace engine
