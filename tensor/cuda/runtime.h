// The slice of the CUDA runtime the engine uses, behind a header that compiles everywhere.
// Built with nvcc when the toolkit is found (runtime.cu, allocator.cu), otherwise from
// runtime_none.cc, whose functions report that this build has no CUDA.
//
//   if (engine::cuda::device_count() == 0) {
//     std::cout << "no GPU: " << engine::cuda::unavailable_reason() << "\n";
//   } else {
//     engine::cuda::set_device(0);
//     void* p = engine::cuda::device_malloc(1024, 0);    // from the caching allocator
//     engine::cuda::copy_host_to_device(p, host, 1024, 0);  // queued on the current stream
//     engine::cuda::device_free(p, 0);                   // back to the cache, not to CUDA
//     engine::cuda::synchronize(0);
//   }
//
// Every kernel of the engine runs on its device's current stream (current_stream), so
// work queued by one op is ordered before the next without host synchronisation. Streams
// and events are opaque pointers here so that this header needs no CUDA headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace engine::cuda {

// True when this binary was compiled with nvcc (the toolkit was found at build time).
bool built_with_cuda();

// The number of usable GPUs; 0 when there is no driver, no device, or no CUDA in the build.
int device_count();

// Why device_count() is 0, in words ("built without CUDA", or the driver's own message).
std::string unavailable_reason();

// The GPU's name and its number of multiprocessors ("NVIDIA H200", 132).
std::string device_name(int device);
int multiprocessor_count(int device);

// Makes `device` current for this thread; throws engine::Error naming it if it is out of range.
void set_device(int device);

// ---- streams and events
using Stream = void*;  // a cudaStream_t
// The stream every engine kernel on `device` is queued on: one per device, created on
// first use, not synchronised with the legacy default stream.
Stream current_stream(int device);
// Waits (on the host) until everything queued on `device`'s current stream has run;
// throws engine::Error if any of it failed.
void synchronize(int device);

// A CUDA event: a marker in a stream that other streams or the host can wait for.
class Event {
 public:
  explicit Event(int device, bool timing = false);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(Stream stream);                  // marks the current end of `stream`
  void block(Stream stream) const;             // `stream` waits for the mark (no host wait)
  void synchronize() const;                    // the host waits for the mark
  float elapsed_ms(const Event& start) const;  // time from `start` to this (both recorded, timing)

 private:
  void* event_ = nullptr;
  int device_;
};

// ---- memory: a caching allocator (allocator.cu). After the first steps of a training
// loop every block it hands out comes from its cache, so a step makes no cudaMalloc or
// cudaFree. Throws engine::Error on failure (with the byte count and the cache's state).
void* device_malloc(size_t bytes, int device);
void device_free(void* ptr, int device);

struct MemoryStats {
  size_t allocated = 0;       // bytes in blocks handed out now (rounded up to size classes)
  size_t cached = 0;          // bytes held from CUDA: handed out + kept for reuse
  size_t peak_allocated = 0;  // the largest `allocated` since the last reset
  int64_t cuda_mallocs = 0;   // cudaMalloc calls made (a step after warm-up adds none)
  int64_t cuda_frees = 0;
};
MemoryStats memory_stats(int device);
void reset_peak_memory(int device);
// Returns every cached block that is not in use to CUDA.
void empty_cache(int device);
// Tests: fill every block handed out from now on with 0xFF bytes (NaN as float32, -1 as
// int64), so an output element a kernel forgot to write shows up in the comparison.
void poison_new_memory(bool on);
// The block size a request of `bytes` is served with (see allocator.cu).
size_t allocation_size(size_t bytes);

// ---- CUDA graphs: the work a piece of code queues on a device's stream, recorded once and
// then launched again as a whole with one call (the host no longer pays a launch per
// kernel). A replay runs the same kernels on the same addresses with the same arguments:
// inputs are copied into the tensors the capture read, outputs read from the tensors it
// wrote, and nothing may wait for the GPU on the host while capturing (no .item()).
// Blocks allocated or freed during the capture stay reserved for the graph until it is
// destroyed (allocator.cu).
//
//   cuda::Graph graph(0);
//   graph.capture_begin();
//   step();                                   // forward, backward, optimizer: queued, not run
//   graph.capture_end();
//   for (...) { x.copy_(next_batch); graph.replay(); }
class Graph {
 public:
  explicit Graph(int device);
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  void capture_begin();
  void capture_end();  // throws, naming the CUDA error, if something in it cannot be captured
  void replay();
  size_t nodes() const;  // kernels, copies and sets recorded

 private:
  int device_;
  int pool_ = 0;
  bool capturing_ = false;
  void* graph_ = nullptr;  // cudaGraph_t
  void* exec_ = nullptr;   // cudaGraphExec_t
};
// True while a Graph is capturing `device`'s stream (work is recorded, not run).
bool is_capturing(int device);
// The allocator's side of a capture (used by Graph): blocks come from a new pool until
// end_graph_pool, and stay in it until release_graph_pool.
int begin_graph_pool(int device);
void end_graph_pool(int device);
void release_graph_pool(int device, int pool);

// ---- copies, queued on the device's current stream.
// Host -> device returns as soon as the bytes are staged in pinned memory (small copies)
// or copied (large ones); the host buffer may be reused right after the call.
void copy_host_to_device(void* dst, const void* src, size_t bytes, int device);
// Device -> host waits for the copy (and everything queued before it) to finish.
void copy_device_to_host(void* dst, const void* src, size_t bytes, int device);
void copy_device_to_device(void* dst, const void* src, size_t bytes, int device);

// A first kernel, kept to prove the toolchain end to end: y = a * x + y on GPU `device`,
// for host arrays x and y of n floats (copied in and out).
void saxpy_on_device(int64_t n, float a, const float* x, float* y, int device);

}  // namespace engine::cuda
