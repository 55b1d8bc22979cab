// Checkpoints in the safetensors format, readable by PyTorch, NumPy and JAX tooling.
//
// Layout: 8 bytes little-endian header length N; N bytes of JSON
//   {"__metadata__": {"k": "v"}, "0.weight": {"dtype": "F32", "shape": [256, 784],
//    "data_offsets": [0, 802816]}, ...}
// padded with spaces to a multiple of 8; then the raw little-endian tensor bytes, each
// tensor at its [begin, end) offsets, covering the data section exactly. Dtypes: F32, I64,
// BF16 and F16 (our float32, int64, bfloat16, float16).
//
//   save_safetensors("ckpt.safetensors", model.state_dict());   // atomic: temp file + rename
//   StateDict sd = load_safetensors("ckpt.safetensors");         // validated, then read
//   model.load_state_dict(sd);
//
// Saving writes a temporary file in the same directory, flushes it to disk and renames it
// over the target, so a crash at any moment leaves either the old or the new checkpoint,
// never a half-written one. Loading checks the whole header (sizes, offsets in range and
// not overlapping, dtypes, shapes) before reading any tensor, and every error names the
// file and, where there is one, the key.
//
// Checksums: a file saved here keeps, in its metadata under "engine.crc32c", the CRC32C
// (crc32c.h) of its header (as written before this entry was added) and of each tensor's
// bytes, in the order of the bytes: "hhhhhhhh t0t0t0t0 t1t1t1t1 ...". Loading recomputes
// them and refuses a file whose header or any tensor differs (a disk fault, a bad copy),
// naming the tensor, rather than resume from silently wrong numbers. Other readers
// (PyTorch, NumPy) see one more metadata entry; a file without it (written elsewhere) is
// loaded unchecked. The entry is not returned among the metadata.
#pragma once

#include <map>
#include <string>

#include "nn/module.h"

namespace engine::nn {

using Metadata = std::map<std::string, std::string>;

// The metadata entry that holds a file's checksums; a caller's metadata may not use it.
inline constexpr char kChecksumKey[] = "engine.crc32c";

void save_safetensors(const std::string& path, const StateDict& tensors, const Metadata& metadata = {});
StateDict load_safetensors(const std::string& path, Metadata* metadata = nullptr);

// Checks, before any work is done, that save_safetensors(path) will be able to create its
// file: the folder exists and this process may write there, and what is at the name, if
// anything, is a file or a link (a save replaces it): never a folder, nor a device such as
// /dev/null, which a save would have replaced for every program on the machine. A training
// run calls it at its start, so that a bad path is reported before the first epoch.
void check_save_path(const std::string& path);

// Checks, at the start, that two saves of one run go to two files: `a` and `b` are named
// by their flags in the error ("--state (the training state)"). One path written two ways
// (x, ./x, d/../x, through a linked folder) is one file, and the later save would replace
// the earlier: the recap given one path for --state and --checkpoint ended with its final
// weights where its training state had been, and could not be resumed. (A link at the name
// itself is replaced by a save, not written through, so it is a name of its own.)
void check_distinct_save_paths(const std::string& a, const std::string& what_a, const std::string& b,
                               const std::string& what_b);

}  // namespace engine::nn
