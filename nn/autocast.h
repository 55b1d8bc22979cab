// Mixed precision, as torch.autocast: inside an Autocast scope, linear and conv2d multiply
// in bfloat16 (or float16) with float32 sums, losses run in float32, and parameters stay
// float32 (the "master weights"): each layer casts its weight to 16 bits for the product,
// and backward writes the weight's gradient in float32 straight from the GEMM's float32
// sums (PyTorch rounds it to 16 bits and widens it back; ours skips both conversions and
// the rounding).
//
//   {
//     nn::Autocast autocast(DType::BFloat16);
//     Variable loss = cross_entropy(model(x), y);   // the Linear layers run on the bfloat16 GEMM
//   }
//   loss.backward();                                 // outside the scope, as PyTorch advises
//   opt.step();                                      // float32 weights, float32 gradients
//
// What runs in 16 bits is what comes out of a 16-bit product: a ReLU after a Linear gets
// bfloat16 values and gives bfloat16 values (each computed in float32 and rounded).
// Scopes nest (the inner one wins) and belong to the thread that opened them.
#pragma once

#include "tensor/dtype.h"

namespace engine::nn {

class Autocast {
 public:
  explicit Autocast(DType dtype = DType::BFloat16, bool enabled = true);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  bool previous_enabled_;
  DType previous_dtype_;
};

// Whether this thread is inside an enabled Autocast scope, and its dtype.
bool autocast_enabled();
DType autocast_dtype();

}  // namespace engine::nn
