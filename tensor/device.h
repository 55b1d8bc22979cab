// Where a tensor's memory lives: the CPU or the N-th CUDA GPU.
//
//   Device d = Device::parse("cuda:1");   // {CUDA, 1}
//   d.str();                               // "cuda:1"
//   Device::cpu() == Device::parse("cpu"); // true
#pragma once

#include <string>

namespace engine {

struct Device {
  enum class Kind { CPU, CUDA };
  Kind kind = Kind::CPU;
  int index = 0;  // the GPU's ordinal; always 0 for the CPU

  static Device cpu() { return {Kind::CPU, 0}; }
  static Device cuda(int index = 0) { return {Kind::CUDA, index}; }
  // Parses "cpu", "cuda" or "cuda:N"; throws engine::Error naming the string otherwise.
  static Device parse(const std::string& name);

  bool is_cpu() const { return kind == Kind::CPU; }
  bool is_cuda() const { return kind == Kind::CUDA; }
  std::string str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
  bool operator==(const Device& o) const { return kind == o.kind && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

}  // namespace engine
