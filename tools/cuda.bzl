"""cuda_library: compiles .cu files with nvcc when the toolkit is present, else a CPU fallback.

    cuda_library(
        name = "runtime",
        cu_srcs = ["runtime.cu"],          # built with nvcc when CUDA is found
        fallback_srcs = ["runtime_none.cc"],  # built instead when it is not
        hdrs = ["runtime.h"],
    )

Both variants expose the same header, so callers never need #ifdef. Device code is built for
sm_90 (H100/H200) with compute_75 PTX embedded, which the driver compiles for any newer GPU.
"""

load("@local_cuda//:defs.bzl", "CUDA_ENABLED", "NVCC")

NVCC_FLAGS = " ".join([
    "-O3",
    "-std=c++17",
    "-Xcompiler -fPIC",
    "-gencode arch=compute_90,code=sm_90",
    "-gencode arch=compute_75,code=compute_75",
])

def cuda_library(name, cu_srcs, fallback_srcs, hdrs = [], srcs = [], deps = [], cu_deps_hdrs = [], **kwargs):
    """srcs: plain C++ built in both variants."""
    if not CUDA_ENABLED:
        native.cc_library(name = name, srcs = srcs + fallback_srcs, hdrs = hdrs, deps = deps, **kwargs)
        return
    objs = []
    for src in cu_srcs:
        obj = "_%s_%s.o" % (name, src.replace("/", "_").replace(".cu", ""))
        native.genrule(
            name = obj + "_nvcc",
            srcs = [src] + hdrs + cu_deps_hdrs,
            outs = [obj],
            cmd = "%s %s -I. -c $(location %s) -o $@" % (NVCC, NVCC_FLAGS, src),
            message = "nvcc " + src,
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = srcs + objs,
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cudart"],
        linkstatic = True,
        **kwargs
    )
