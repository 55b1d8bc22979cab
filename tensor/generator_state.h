// A Generator's state (random.h) as a tensor, so that a checkpoint (a safetensors file)
// can hold it and a resumed run draws the same numbers as one that never stopped.
//
//   all["sampler.generator"] = generator_state(g);                    // 4 int64
//   g.set_state(parse_generator_state(all.at("sampler.generator"), "checkpoint's sampler.generator"));
#pragma once

#include <string>

#include "tensor/random.h"
#include "tensor/tensor.h"

namespace engine {

// {state, inc, has_spare (0 or 1), the spare normal's float32 bits}, as int64.
Tensor generator_state(const Generator& g);
// The inverse; anything else is refused, naming `what` (the key it came from).
Generator::State parse_generator_state(const Tensor& t, const std::string& what);

}  // namespace engine
