"""Our training step against PyTorch's, side by side, alternating, one thread each: the MLP
(--model mlp, the default) or the lessons' CNN (--model cnn, beside bench/torch_cnn_step.py).

    bash tools/setup.sh --bench && bazel build //bench:train_step
    /usr/bin/python3 bench/train_step.py --rounds 7
    /usr/bin/python3 bench/train_step.py --model cnn --autocast bf16   # both under bfloat16 autocast
    /usr/bin/python3 bench/train_step.py --cpu avx2   # both held to AVX2, as on a CPU without AVX-512

Each round runs bazel-bin/bench/train_step, then ../shared/reference/torch_mlp_step.py,
for each batch size (order alternating between rounds); each prints its median step time
over its own timed rounds. Reported: the medians, and the median of the per-round ratios
of samples/s (ours / PyTorch's), and peak resident memory of both processes.

One thread each means one thread each: torch.set_num_threads(1) (the reference script's
--threads 1) does not stop Debian's OpenBLAS from running its own thread pool (user + sys
time exceeds wall time), so the peer runs with OPENBLAS_NUM_THREADS=1 and
OMP_NUM_THREADS=1. --peer-threads-default leaves them unset, to see PyTorch as shipped.
The peer's OpenBLAS runs the best kernel the CPU allows (bench/peer.py), printed first.
"""
import argparse, json, os, resource, statistics, subprocess, sys

from peer import at_level, describe_peer, peer_env

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run(cmd, env=None):
    """Runs one benchmark process; returns its JSON line and its peak RSS in MB."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    line = [l for l in out.splitlines() if l.startswith("{")][-1]
    # ru_maxrss of children is the max over all finished children: only a rise is this one's.
    return json.loads(line), peak / 1024.0 if peak > before else None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--batches", type=int, nargs="+", default=[64, 256])
    p.add_argument("--peer-threads-default", action="store_true")
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp",
                   help="cnn: the lessons' CNN beside bench/torch_cnn_step.py")
    p.add_argument("--reference", default=None, help="the PyTorch script (default: the model's)")
    p.add_argument("--autocast", choices=["off", "bf16"], default="off",
                   help="bf16: both steps under bfloat16 autocast (--model cnn: torch.autocast beside ours)")
    p.add_argument("--cpu", choices=["avx512", "avx2", "default"], default="avx512",
                   help="hold both to a CPU level: ours by ENGINE_CPU_CAPABILITY, PyTorch by "
                        "ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA and its OpenBLAS kernel (bench/peer.py)")
    a = p.parse_args()
    if a.autocast != "off" and a.model != "cnn":
        sys.exit("train_step.py: --autocast needs --model cnn (the MLP's reference script has no autocast)")
    if a.reference is None:
        a.reference = (os.path.join(HERE, "torch_cnn_step.py") if a.model == "cnn" else
                       os.path.join(ROOT, "..", "shared", "reference", "torch_mlp_step.py"))
    ours_bin = os.path.join(ROOT, "bazel-bin", "bench", "train_step")
    if not os.path.exists(ours_bin):
        sys.exit("train_step.py: build it first: bazel build //bench:train_step")
    if not os.path.exists(a.reference):
        sys.exit("train_step.py: PyTorch reference not found at " + a.reference)
    torch_env = at_level(peer_env(threads=0 if a.peer_threads_default else 1), a.cpu)
    ours_env = at_level(os.environ, a.cpu)
    print("peer:", describe_peer(torch_env), flush=True)
    rows = []
    for batch in a.batches:
        ours_sps, torch_sps, ratios, ours_rss, torch_rss = [], [], [], [], []
        for r in range(a.rounds):
            steps = ["--steps", "30"] if a.model == "cnn" else []
            if a.autocast != "off":
                steps += ["--autocast", a.autocast]
            pair = [("ours", [ours_bin, "--batch", str(batch), "--model", a.model] + steps),
                    ("torch", ["/usr/bin/python3", a.reference, "--batch", str(batch), "--threads", "1"] + steps)]
            if r % 2:
                pair.reverse()
            got = {}
            for name, cmd in pair:
                got[name] = run(cmd, torch_env if name == "torch" else ours_env)
            ours_sps.append(got["ours"][0]["samples_per_s"])
            torch_sps.append(got["torch"][0]["samples_per_s"])
            ratios.append(ours_sps[-1] / torch_sps[-1])
            ours_rss.append(got["ours"][0].get("peak_rss_mb"))
            if got["torch"][1]:
                torch_rss.append(got["torch"][1])
        row = {"bench": "train_step", "model": a.model, "autocast": a.autocast, "batch": batch,
               "ours_cpu": got["ours"][0].get("cpu"), "ours_samples_per_s": statistics.median(ours_sps),
               "torch_samples_per_s": statistics.median(torch_sps), "ratio": round(statistics.median(ratios), 3),
               "ours_peak_rss_mb": max(ours_rss), "torch_peak_rss_mb": max(torch_rss) if torch_rss else None}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print("\n| batch | ours samples/s | PyTorch samples/s | ratio (median of pairs) | ours peak RSS MB | PyTorch peak RSS MB |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print("| %d | %.0f | %.0f | %.2f | %.1f | %s |" % (r["batch"], r["ours_samples_per_s"], r["torch_samples_per_s"],
              r["ratio"], r["ours_peak_rss_mb"], "%.0f" % r["torch_peak_rss_mb"] if r["torch_peak_rss_mb"] else "n/a"))


if __name__ == "__main__":
    main()
