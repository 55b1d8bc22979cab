// Strict parsing of numbers that come from outside the program: command-line flags,
// environment variables, checkpoint metadata. The whole text must be the number (no
// trailing junk, no empty string) and it must lie in [min, max]; otherwise an
// engine::Error names what was being read and what came.
//
//   const int64_t epoch = engine::parse_int(meta["epoch"], "checkpoint a.safetensors: key \"epoch\"", 0, 1000000);
//   const double lr = engine::parse_double(text, "--lr", 0, 1e3);
#pragma once

#include <cstdint>
#include <string>

namespace engine {

// A base-10 integer in [min, max] ('+' or '-' sign allowed, nothing else around it).
int64_t parse_int(const std::string& text, const std::string& what, int64_t min, int64_t max);

// A finite decimal or exponent-form number in [min, max]; "nan" and "inf" are refused.
double parse_double(const std::string& text, const std::string& what, double min, double max);

}  // namespace engine
