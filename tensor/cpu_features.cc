#include "tensor/cpu_features.h"

namespace engine {

bool cpu_has_avx512() {
  static const bool ok = __builtin_cpu_supports("avx512f");
  return ok;
}

}  // namespace engine
