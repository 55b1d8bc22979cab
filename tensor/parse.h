// Strict parsing of numbers that come from outside the program: command-line flags,
// environment variables, checkpoint metadata. The whole text must be the number (no
// trailing junk, no empty string) and it must lie in [min, max]; otherwise an
// engine::Error names what was being read and what came.
//
//   const int64_t epoch = engine::parse_int(meta["epoch"], "checkpoint a.safetensors: key \"epoch\"", 0, 1000000);
//   const double lr = engine::parse_double(text, "--lr", 0, 1e3);
//   const std::string algo = engine::parse_choice(text, "ENGINE_NCCL_ALLREDUCE", {"nccl", "ring"});
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

namespace engine {

// A base-10 integer in [min, max] ('+' or '-' sign allowed, nothing else around it).
int64_t parse_int(const std::string& text, const std::string& what, int64_t min, int64_t max);

// A finite decimal or exponent-form number in [min, max]; "nan" and "inf" are refused.
double parse_double(const std::string& text, const std::string& what, double min, double max);

// One of a few words, exactly (a setting such as ENGINE_SHM=0|1): returns it, or throws
// naming what was read, what came and every word allowed.
std::string parse_choice(const std::string& text, const std::string& what, std::initializer_list<const char*> allowed);

}  // namespace engine
