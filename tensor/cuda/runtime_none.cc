// CPU-only build of tensor/cuda/runtime.h: no CUDA toolkit was found when this was built.
#include <string>

#include "tensor/check.h"
#include "tensor/cuda/runtime.h"

namespace engine::cuda {

namespace {
[[noreturn]] void no_cuda(const char* what) {
  throw Error(std::string("[cuda] ") + what +
              ": this build has no CUDA (no toolkit was found at build time; set CUDA_PATH and rebuild)");
}
}  // namespace

bool built_with_cuda() { return false; }
int device_count() { return 0; }
std::string unavailable_reason() { return "built without CUDA (no toolkit found at build time)"; }
std::string device_name(int) { no_cuda("device_name"); }
int multiprocessor_count(int) { no_cuda("multiprocessor_count"); }
void set_device(int) { no_cuda("set_device"); }
Stream current_stream(int) { no_cuda("current_stream"); }
void synchronize(int) { no_cuda("synchronize"); }
Event::Event(int, bool) { no_cuda("Event"); }
Event::~Event() {}
void Event::record(Stream) { no_cuda("Event::record"); }
void Event::block(Stream) const { no_cuda("Event::block"); }
void Event::synchronize() const { no_cuda("Event::synchronize"); }
float Event::elapsed_ms(const Event&) const { no_cuda("Event::elapsed_ms"); }
MemoryStats memory_stats(int) { return {}; }
void reset_peak_memory(int) {}
void empty_cache(int) {}
Graph::Graph(int device) : device_(device) { no_cuda("Graph"); }
Graph::~Graph() = default;
void Graph::capture_begin() { no_cuda("Graph::capture_begin"); }
void Graph::capture_end() { no_cuda("Graph::capture_end"); }
void Graph::replay() { no_cuda("Graph::replay"); }
size_t Graph::nodes() const { return 0; }
bool is_capturing(int) { return false; }
int begin_graph_pool(int) { no_cuda("begin_graph_pool"); }
void end_graph_pool(int) {}
void release_graph_pool(int, int) {}
void poison_new_memory(bool) {}
void* device_malloc(size_t, int) { no_cuda("device_malloc"); }
void device_free(void*, int) {}
void copy_host_to_device(void*, const void*, size_t, int) { no_cuda("copy_host_to_device"); }
void copy_device_to_host(void*, const void*, size_t, int) { no_cuda("copy_device_to_host"); }
void copy_device_to_device(void*, const void*, size_t, int) { no_cuda("copy_device_to_device"); }
void saxpy_on_device(int64_t, float, const float*, float*, int) { no_cuda("saxpy_on_device"); }

}  // namespace engine::cuda
