// CUDA graphs of tensor/cuda/runtime.h: stream capture on the device's one stream, with the
// caching allocator drawing the capture's blocks from a pool of the graph's own.
#include <cuda_runtime.h>

#include "tensor/cuda/check.cuh"
#include "tensor/cuda/runtime.h"

namespace engine::cuda {

Graph::Graph(int device) : device_(device) { set_device(device); }

Graph::~Graph() {
  if (capturing_) {  // an exception left the capture open: close it, or the stream stays unusable
    cudaGraph_t partial = nullptr;
    cudaStreamEndCapture(static_cast<cudaStream_t>(current_stream(device_)), &partial);
    cudaGetLastError();
    if (partial) cudaGraphDestroy(partial);
    end_graph_pool(device_);
  }
  if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  if (graph_) cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
  // A replay still running uses the pool's blocks; their next owner's kernels queue on the
  // same stream behind it, so the blocks may go back to the common cache at once.
  if (pool_) release_graph_pool(device_, pool_);
}

void Graph::capture_begin() {
  ENGINE_REQUIRE(!graph_ && !pool_, "[cuda] this Graph was captured already; make a new one to capture again");
  set_device(device_);
  pool_ = begin_graph_pool(device_);
  // Relaxed: the allocator may still call cudaMalloc (outside the stream) during a capture.
  const cudaError_t status =
      cudaStreamBeginCapture(static_cast<cudaStream_t>(current_stream(device_)), cudaStreamCaptureModeRelaxed);
  if (status != cudaSuccess) end_graph_pool(device_);
  check(status, "cudaStreamBeginCapture");
  capturing_ = true;
}

void Graph::capture_end() {
  cudaGraph_t graph = nullptr;
  ENGINE_REQUIRE(capturing_, "[cuda] capture_end() without capture_begin()");
  const cudaError_t status = cudaStreamEndCapture(static_cast<cudaStream_t>(current_stream(device_)), &graph);
  capturing_ = false;
  end_graph_pool(device_);
  check(status,
        "cudaStreamEndCapture (did something in the capture wait for the GPU on the host, or use another "
        "stream?)");
  graph_ = graph;
  cudaGraphExec_t exec = nullptr;
  check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  exec_ = exec;
}

void Graph::replay() {
  ENGINE_REQUIRE(exec_, "[cuda] replay() before capture_end()");
  set_device(device_);
  check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), static_cast<cudaStream_t>(current_stream(device_))),
        "cudaGraphLaunch");
}

size_t Graph::nodes() const {
  size_t n = 0;
  if (graph_) check(cudaGraphGetNodes(static_cast<cudaGraph_t>(graph_), nullptr, &n), "cudaGraphGetNodes");
  return n;
}

bool is_capturing(int device) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(static_cast<cudaStream_t>(current_stream(device)), &status), "cudaStreamIsCapturing");
  return status == cudaStreamCaptureStatusActive;
}

}  // namespace engine::cuda
