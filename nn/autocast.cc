#include "nn/autocast.h"

#include "tensor/check.h"

namespace engine::nn {
namespace {
thread_local bool enabled_now = false;
thread_local DType dtype_now = DType::BFloat16;
}  // namespace

Autocast::Autocast(DType dtype, bool enabled) : previous_enabled_(enabled_now), previous_dtype_(dtype_now) {
  ENGINE_REQUIRE(is_half(dtype), "[Autocast] computes in bfloat16 or float16, got ", dtype_name(dtype));
  enabled_now = enabled;
  dtype_now = dtype;
}

Autocast::~Autocast() {
  enabled_now = previous_enabled_;
  dtype_now = previous_dtype_;
}

bool autocast_enabled() { return enabled_now; }
DType autocast_dtype() { return dtype_now; }

}  // namespace engine::nn
