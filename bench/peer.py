"""The peer at its best, and said so: the environment every bench driver runs PyTorch in,
and a line describing what that PyTorch runs on.

    from peer import peer_env, describe_peer
    env = peer_env(threads=1)        # the best OpenBLAS kernel for this CPU, one thread
    print(describe_peer(env))        # "PyTorch 1.13.0a0, OpenBLAS kernel SkylakeX, oneDNN yes, 1 thread"

Machines of this kind may set OPENBLAS_CORETYPE (and OPENBLAS_L2_SIZE), which hold OpenBLAS
to an older kernel (Haswell's AVX2 on an AVX-512 CPU); the peer runs without them. And
OpenBLAS's own detection can fail on a virtual CPU with a generic name ("Intel Xeon
Processor"): Debian's OpenBLAS 0.3.21 then falls back to its oldest kernel, Prescott (SSE3).
So the peer gets the kernel the CPU's features allow (SkylakeX with AVX-512, else Haswell
with AVX2), named explicitly, and describe_peer says which kernel ran.
"""
import os, subprocess

HELD_BACK = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def best_kernel():
    """The OpenBLAS kernel this CPU's features allow: SkylakeX, Haswell, or None."""
    try:
        flags = next(l for l in open("/proc/cpuinfo") if l.startswith("flags")).split()
    except (OSError, StopIteration):
        return None
    if all(f in flags for f in ("avx512f", "avx512vl", "avx512bw", "avx512dq")):
        return "SkylakeX"
    if all(f in flags for f in ("avx2", "fma")):
        return "Haswell"
    return None


# OpenBLAS kernels by the widest vector unit they use: a detected kernel below the CPU's
# best is a failed detection, and the CPU's best is named instead.
RANK = {"SkylakeX": 4, "Cooperlake": 4, "SapphireRapids": 4, "Haswell": 3, "Zen": 3, "Sandybridge": 2}


def detected_kernel(env):
    """The kernel OpenBLAS picks by itself under env."""
    probe = ("import ctypes; lib = ctypes.CDLL('libopenblas.so.0'); "
             "lib.openblas_get_corename.restype = ctypes.c_char_p; print(lib.openblas_get_corename().decode())")
    try:
        return subprocess.run(["/usr/bin/python3", "-c", probe], env=env, capture_output=True, text=True,
                              timeout=60).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def peer_env(threads=1):
    """os.environ without the variables that hold OpenBLAS back, and with the CPU's best
    kernel named where OpenBLAS's own detection picks a lesser one (see above); with
    threads, the thread pools of OpenBLAS and OpenMP held to that many (torch's
    set_num_threads alone does not stop Debian's OpenBLAS from starting its own)."""
    env = {k: v for k, v in os.environ.items() if k not in HELD_BACK}
    best = best_kernel()
    if best and RANK.get(detected_kernel(env), 0) < RANK[best]:
        env["OPENBLAS_CORETYPE"] = best
    if threads:
        env.update(OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    return env


# A CPU level (as our ENGINE_CPU_CAPABILITY names it) and what holds PyTorch to the same:
# ATen's own loops (ATEN_CPU_CAPABILITY), oneDNN's convolutions (ONEDNN_MAX_CPU_ISA) and
# OpenBLAS's GEMM (its AVX2 kernel, or Prescott's SSE3 for the x86-64 baseline).
LEVELS = {
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "OPENBLAS_CORETYPE": "Haswell"},
    "default": {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41", "OPENBLAS_CORETYPE": "Prescott"},
}


def at_level(env, level):
    """env with both sides held to a CPU level: ENGINE_CPU_CAPABILITY for ours, the
    variables of LEVELS for PyTorch. Any other level (avx512, the CPU's best) leaves env as it is."""
    env = dict(env)
    if level in LEVELS:
        env.update(LEVELS[level], ENGINE_CPU_CAPABILITY=level)
    return env


PROBE = r"""
import ctypes, torch
core = "unknown"
for name in ("libopenblas.so.0", "libopenblasp.so.0"):
    try:
        lib = ctypes.CDLL(name)
        lib.openblas_get_corename.restype = ctypes.c_char_p
        core = lib.openblas_get_corename().decode()
        break
    except (OSError, AttributeError):
        pass
# ATen's elementwise loops and reductions: the level it dispatches to (ATEN_CPU_CAPABILITY).
aten = next((l.split(":")[-1].strip() for l in torch.__config__.show().splitlines()
             if "CPU capability usage" in l), "unknown")
print(f"PyTorch {torch.__version__}, OpenBLAS kernel {core}, "
      f"oneDNN {'yes' if torch.backends.mkldnn.is_available() else 'no'}, {torch.get_num_threads()} thread(s), "
      f"ATen loops {aten}")
"""


def describe_peer(env):
    """One line on the peer as it runs under env: its version, the OpenBLAS kernel chosen,
    whether oneDNN (mkldnn) is there, its threads."""
    try:
        out = subprocess.run(["/usr/bin/python3", "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
        return out.stdout.strip() or ("peer probe failed: " + out.stderr.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"peer probe failed: {e}"


if __name__ == "__main__":
    # For programs that link OpenBLAS themselves (bench/gemm_bench):
    #   env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $(/usr/bin/python3 bench/peer.py) bazel-bin/bench/gemm_bench
    # prints OPENBLAS_CORETYPE=<kernel> where OpenBLAS's own detection would pick a lesser one.
    e = peer_env(threads=0)
    if "OPENBLAS_CORETYPE" in e:
        print("OPENBLAS_CORETYPE=" + e["OPENBLAS_CORETYPE"])
