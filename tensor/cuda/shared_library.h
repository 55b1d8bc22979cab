// CUDA's libraries (cuBLAS, NCCL) opened on first use rather than linked, so that a program
// that never touches a GPU does not map them: libcublasLt alone is half a gigabyte, and
// loading it costs a CPU-only training step ~150 MB of resident memory and its start-up time.
//
//   static const SharedLibrary lib("libcublas.so.13", "cuBLAS, for matmul on the GPU");
//   decltype(&cublasSgemm_v2) sgemm = lib.function("cublasSgemm_v2");  // throws if it is missing
//
// The library is searched for as the dynamic loader does (LD_LIBRARY_PATH, the ld.so cache)
// and stays loaded until the process exits.
#pragma once

#include <string>

namespace engine::cuda {

class SharedLibrary {
 public:
  // Throws engine::Error naming `soname`, what it is needed for, the loader's reason, and
  // how to make it findable.
  SharedLibrary(std::string soname, std::string purpose);

  // The function `symbol`, converted to whatever function pointer it is assigned to;
  // throws engine::Error naming it and the library when the library has no such symbol.
  struct Function {
    void* address;
    template <class F>
    operator F*() const {
      return reinterpret_cast<F*>(address);
    }
  };
  Function function(const char* symbol) const { return {address(symbol)}; }

  // The file it was loaded from ("/usr/local/cuda/lib64/libcublas.so.13").
  std::string path() const;

 private:
  void* address(const char* symbol) const;
  std::string soname_, purpose_;
  void* handle_ = nullptr;
};

}  // namespace engine::cuda
