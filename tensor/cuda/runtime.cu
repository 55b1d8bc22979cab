// CUDA build of tensor/cuda/runtime.h (the allocator is in allocator.cu). Kernels first,
// then the host-side wrappers.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <string>

#include "tensor/check.h"
#include "tensor/cuda/check.cuh"
#include "tensor/cuda/runtime.h"

namespace engine::cuda {

// ---------------------------------------------------------------------------------------
// Kernels

// One thread per element, grid-stride loop so any n fits any grid.
__global__ void saxpy_kernel(int64_t n, float a, const float* x, float* y) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x) {
    y[i] = a * x[i] + y[i];
  }
}

// ---------------------------------------------------------------------------------------
// Devices

bool built_with_cuda() { return true; }

int device_count() {
  // Asked by every set_device: counted once (GPUs do not come and go under a process).
  static const int count = [] {
    int n = 0;
    // Any failure here (no driver, driver too old, no device) means "no usable GPU".
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky error
      return 0;
    }
    return n;
  }();
  return count;
}

std::string unavailable_reason() {
  int n = 0;
  cudaError_t status = cudaGetDeviceCount(&n);
  if (status != cudaSuccess) {
    cudaGetLastError();
    return std::string("CUDA runtime reports: ") + cudaGetErrorString(status);
  }
  if (n == 0) return "the CUDA driver sees no GPU";
  return "";
}

void set_device(int device) {
  const int n = device_count();
  if (device < 0 || device >= n) {
    throw Error("[cuda] set_device(" + std::to_string(device) + ") but this machine has " + std::to_string(n) +
                " usable GPU(s)" + (n == 0 ? " (" + unavailable_reason() + ")" : ""));
  }
  check(cudaSetDevice(device), "cudaSetDevice");
}

std::string device_name(int device) {
  cudaDeviceProp p;
  check(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties");
  return p.name;
}

int multiprocessor_count(int device) {
  static std::atomic<int> cached[kMaxDevices] = {};  // asked on every launch: read once
  ENGINE_REQUIRE(device >= 0 && device < kMaxDevices, "[cuda] device index ", device, " is out of range");
  if (const int n = cached[device].load(std::memory_order_relaxed)) return n;
  int n = 0;
  check(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
  cached[device].store(n, std::memory_order_relaxed);
  return n;
}

// ---------------------------------------------------------------------------------------
// Streams and events

Stream current_stream(int device) {
  static std::mutex mu;
  static std::atomic<void*> streams[kMaxDevices] = {};  // set once under the lock, then only read
  ENGINE_REQUIRE(device >= 0 && device < kMaxDevices, "[cuda] device index ", device, " is out of range");
  if (void* s = streams[device].load(std::memory_order_acquire)) return s;
  std::lock_guard<std::mutex> lock(mu);
  if (!streams[device].load(std::memory_order_relaxed)) {
    set_device(device);
    cudaStream_t s;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    streams[device].store(s, std::memory_order_release);
  }
  return streams[device].load(std::memory_order_relaxed);
}

void synchronize(int device) {
  check(cudaStreamSynchronize(stream_of(device)), "waiting for the GPU (an earlier kernel failed)");
}

Event::Event(int device, bool timing) : device_(device) {
  set_device(device);
  cudaEvent_t e;
  check(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming), "cudaEventCreate");
  event_ = e;
}
Event::~Event() { cudaEventDestroy(static_cast<cudaEvent_t>(event_)); }
void Event::record(Stream stream) {
  check(cudaEventRecord(static_cast<cudaEvent_t>(event_), static_cast<cudaStream_t>(stream)), "cudaEventRecord");
}
void Event::block(Stream stream) const {
  check(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event_), 0),
        "cudaStreamWaitEvent");
}
void Event::synchronize() const {
  check(cudaEventSynchronize(static_cast<cudaEvent_t>(event_)), "cudaEventSynchronize");
}
float Event::elapsed_ms(const Event& start) const {
  float ms = 0;
  check(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start.event_), static_cast<cudaEvent_t>(event_)),
        "cudaEventElapsedTime");
  return ms;
}

// ---------------------------------------------------------------------------------------
// Copies

namespace {
// Pinned staging for host -> device copies. A copy from pageable memory makes the host
// wait until the GPU has drained every kernel queued before it; staging through pinned
// memory lets the copy queue behind them like a kernel. Two buffers per device take turns,
// each guarded by an event that says when the GPU has finished reading it.
struct Staging {
  static constexpr size_t kBytes = size_t(4) << 20;
  std::mutex mu;
  void* buffer[2] = {};
  cudaEvent_t done[2] = {};
  int next = 0;
};
Staging& staging(int device) {
  static Staging s[kMaxDevices];
  return s[device];
}
}  // namespace

void copy_host_to_device(void* dst, const void* src, size_t bytes, int device) {
  if (bytes == 0) return;
  set_device(device);
  cudaStream_t stream = stream_of(device);
  if (bytes > Staging::kBytes) {  // large: the copy itself dominates; go straight from pageable memory
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream), "copy host->device");
    check(cudaStreamSynchronize(stream), "copy host->device");
    return;
  }
  Staging& s = staging(device);
  std::lock_guard<std::mutex> lock(s.mu);
  const int k = s.next;
  s.next ^= 1;
  if (!s.buffer[k]) {
    check(cudaMallocHost(&s.buffer[k], Staging::kBytes), "cudaMallocHost (pinned staging buffer)");
    check(cudaEventCreateWithFlags(&s.done[k], cudaEventDisableTiming), "cudaEventCreate");
  } else {
    check(cudaEventSynchronize(s.done[k]), "waiting for a staging buffer");
  }
  std::memcpy(s.buffer[k], src, bytes);
  check(cudaMemcpyAsync(dst, s.buffer[k], bytes, cudaMemcpyHostToDevice, stream), "copy host->device");
  check(cudaEventRecord(s.done[k], stream), "cudaEventRecord");
}

void copy_device_to_host(void* dst, const void* src, size_t bytes, int device) {
  if (bytes == 0) return;
  set_device(device);
  cudaStream_t stream = stream_of(device);
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream), "copy device->host");
  check(cudaStreamSynchronize(stream), "copy device->host (or a kernel queued before it)");
}

void copy_device_to_device(void* dst, const void* src, size_t bytes, int device) {
  if (bytes == 0) return;
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_of(device)), "copy device->device");
}

void saxpy_on_device(int64_t n, float a, const float* x, float* y, int device) {
  if (n == 0) return;
  const size_t bytes = size_t(n) * sizeof(float);
  float* dx = static_cast<float*>(device_malloc(bytes, device));
  float* dy = static_cast<float*>(device_malloc(bytes, device));
  try {
    copy_host_to_device(dx, x, bytes, device);
    copy_host_to_device(dy, y, bytes, device);
    const int threads = 256;
    const int blocks = int(std::min<int64_t>((n + threads - 1) / threads, 65535));
    saxpy_kernel<<<blocks, threads, 0, stream_of(device)>>>(n, a, dx, dy);
    check(cudaGetLastError(), "saxpy_kernel launch");
    copy_device_to_host(y, dy, bytes, device);
  } catch (...) {
    device_free(dx, device);
    device_free(dy, device);
    throw;
  }
  device_free(dx, device);
  device_free(dy, device);
}

}  // namespace engine::cuda
