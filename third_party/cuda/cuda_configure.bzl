"""Finds the CUDA toolkit and exposes it as the repository @local_cuda.

Looks at $CUDA_PATH, then /usr/local/cuda, for bin/nvcc. Found: @local_cuda has the toolkit's
headers and cudart (static) as cc_library targets, and defs.bzl says
CUDA_ENABLED = True. Not found (or ENGINE_CUDA=0 in the environment): the same targets exist
but are empty, CUDA_ENABLED = False, and //tools:cuda.bzl builds the CPU fallbacks instead.
"""

_ENABLED_BUILD = """
package(default_visibility = ["//visibility:public"])
cc_library(
    name = "headers",
    hdrs = glob(["include/**"]),
    includes = ["include"],
)
# linkstatic: without it the fastbuild shared-library mode leaves cudart symbols unresolved.
cc_library(
    name = "cudart",
    srcs = ["lib64/libcudart_static.a"],
    linkopts = ["-ldl", "-lpthread", "-lrt"],
    linkstatic = True,
    deps = [":headers"],
)
# cuBLAS and NCCL are not linked: the engine opens them when a GPU first needs them
# (tensor/cuda/shared_library.h), so CPU-only programs never map them.
"""

_DISABLED_BUILD = """
package(default_visibility = ["//visibility:public"])
cc_library(name = "headers")
cc_library(name = "cudart")
"""

def _find_cuda(rctx):
    if rctx.os.environ.get("ENGINE_CUDA", "1") == "0":
        return None
    candidates = []
    if rctx.os.environ.get("CUDA_PATH"):
        candidates.append(rctx.os.environ["CUDA_PATH"])
    candidates.append("/usr/local/cuda")
    for c in candidates:
        if rctx.path(c + "/bin/nvcc").exists and rctx.path(c + "/lib64/libcudart_static.a").exists:
            return c
    return None

def _cuda_configure_impl(rctx):
    root = _find_cuda(rctx)
    if root == None:
        rctx.file("BUILD", _DISABLED_BUILD)
        rctx.file("defs.bzl", "CUDA_ENABLED = False\nNVCC = \"\"\nCUDA_ROOT = \"\"\n")
        return
    rctx.symlink(root + "/include", "include")
    rctx.symlink(root + "/lib64", "lib64")
    rctx.file("BUILD", _ENABLED_BUILD)
    rctx.file("defs.bzl", "CUDA_ENABLED = True\nNVCC = \"%s/bin/nvcc\"\nCUDA_ROOT = \"%s\"\n" % (root, root))

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["CUDA_PATH", "ENGINE_CUDA"],
    local = True,
)
