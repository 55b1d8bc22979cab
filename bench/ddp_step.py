"""Our DDP training step against PyTorch DDP over gloo, side by side, alternating.

    bash tools/setup.sh --bench && bazel build //bench:ddp_step
    /usr/bin/python3 bench/ddp_step.py --rounds 5

For world 1 and 2 and batch 64 and 256 per rank, each round runs bazel-bin/bench/ddp_step
and ../shared/reference/torch_ddp_step.py (order alternating between rounds). Reported:
median global samples/s of each, the median of the per-round ratios, our exposed
communication (step time minus the same step under no_sync), and our 2-rank over 1-rank
throughput. The peer runs with OPENBLAS_NUM_THREADS=1 (see bench/train_step.py for why).
--gradient-as-bucket-view runs ours with that DDP option (PyTorch's default, as in the
reference script, is off).
"""
import argparse, json, os, statistics, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def last_json(cmd, env=None):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return [json.loads(l) for l in out.splitlines() if l.startswith("{")][-1]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--gradient-as-bucket-view", action="store_true",
                   help="run ours with DDPOptions::gradient_as_bucket_view (no copy back into .grad)")
    p.add_argument("--reference", default=os.path.join(ROOT, "..", "shared", "reference", "torch_ddp_step.py"))
    a = p.parse_args()
    ours_bin = os.path.join(ROOT, "bazel-bin", "bench", "ddp_step")
    if not os.path.exists(ours_bin):
        sys.exit("ddp_step.py: build it first: bazel build //bench:ddp_step")
    peer_env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    med = statistics.median
    results = {}
    for world in (1, 2):
        for batch in (64, 256):
            ours, torch, ratio, exposed = [], [], [], []
            for r in range(a.rounds):
                ours_cmd = [ours_bin, "--world", str(world), "--batch", str(batch)]
                if a.gradient_as_bucket_view:
                    ours_cmd.append("--gradient-as-bucket-view")
                runs = [("ours", ours_cmd, None),
                        ("torch", ["/usr/bin/python3", a.reference, "--world", str(world), "--batch", str(batch),
                                   "--port", str(29700 + r)], peer_env)]
                if r % 2:
                    runs.reverse()
                got = {name: last_json(cmd, env) for name, cmd, env in runs}
                ours.append(got["ours"]["global_samples_per_s"])
                torch.append(got["torch"]["global_samples_per_s"])
                ratio.append(ours[-1] / torch[-1])
                exposed.append(got["ours"]["exposed_comm_ms"])
            results[(world, batch)] = (med(ours), med(torch), med(ratio), med(exposed))
    print("| world | batch per rank | ours samples/s | PyTorch DDP samples/s | ratio | our exposed comm ms |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for (world, batch), (o, t, r, e) in sorted(results.items()):
        print(f"| {world} | {batch} | {o:.0f} | {t:.0f} | {r:.2f} | {e:.3f} |")
        print(json.dumps({"bench": "ddp_step", "world": world, "batch": batch, "ours": o, "torch": t, "ratio": r,
                          "exposed_ms": e}), file=sys.stderr)
    for batch in (64, 256):
        print(f"\nours, 2 ranks over 1 rank, batch {batch}: {results[(2, batch)][0] / results[(1, batch)][0]:.2f}x")


if __name__ == "__main__":
    main()
