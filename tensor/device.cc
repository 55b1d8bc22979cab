#include "tensor/device.h"

#include <cctype>

#include "tensor/check.h"

namespace engine {

Device Device::parse(const std::string& name) {
  if (name == "cpu") return cpu();
  if (name == "cuda") return cuda(0);
  if (name.rfind("cuda:", 0) == 0 && name.size() > 5) {
    const std::string digits = name.substr(5);
    bool all_digits = digits.size() <= 6;
    for (char c : digits) all_digits = all_digits && std::isdigit(static_cast<unsigned char>(c));
    if (all_digits) return cuda(std::stoi(digits));
  }
  throw Error("[Device] cannot parse device \"" + name + "\"; expected \"cpu\", \"cuda\" or \"cuda:N\"");
}

}  // namespace engine
