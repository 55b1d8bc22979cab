// The caching allocator's size classes (see allocator.cu), built with or without CUDA so
// the rounding rule is tested everywhere.
#include <algorithm>

#include "tensor/cuda/runtime.h"

namespace engine::cuda {

size_t allocation_size(size_t bytes) {
  if (bytes <= 4096) return std::max<size_t>(512, (bytes + 511) / 512 * 512);
  size_t top = 1;
  while (top * 2 <= bytes) top *= 2;  // the power of two at or below `bytes`
  const size_t step = top / 4;        // four classes per power of two: at most 25% wasted
  return (bytes + step - 1) / step * step;
}

}  // namespace engine::cuda
