// A process's resource limits in words, for the errors that meet them: a write past
// `ulimit -f`, an allocation past `ulimit -v`. Where the limit is not set there is nothing
// to say, and each returns "".
//
//   throw Error(std::string("[Storage] out of memory allocating 4096 bytes on cpu") +
//               engine::address_space_limit_words());
//   // "... on cpu (this process may map at most 512,000,000 bytes, ulimit -v, and has
//   //  330,000,000 mapped)"
#pragma once

#include <cstdint>
#include <string>

namespace engine {

// 1024000 -> "1,024,000".
std::string with_commas(uint64_t n);

// " (this process may write files of at most 1,024,000 bytes: ulimit -f)", or "".
std::string file_size_limit_words();

// " (this process may map at most 512,000,000 bytes, ulimit -v, and has 330,000,000
// mapped)", or "".
std::string address_space_limit_words();

}  // namespace engine
