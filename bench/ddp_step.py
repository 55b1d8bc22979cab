"""Our DDP training step against PyTorch DDP over gloo, side by side, alternating.

    bash tools/setup.sh --bench && bazel build //bench:ddp_step
    /usr/bin/python3 bench/ddp_step.py --rounds 5

For batch 64 and 256 per rank, each round runs bazel-bin/bench/ddp_step and
../shared/reference/torch_ddp_step.py at world 1 and world 2 (the order of the four runs
alternating between rounds). Reported: median global samples/s of each, the median of the
per-round ratios ours/PyTorch, our exposed communication (step time minus the same step
under no_sync, on rank 0 and against the slowest rank), and our 2-rank over 1-rank
throughput as the median of per-round ratios (both measured in the same round, so a slow
spell of this shared machine hits both). The peer runs with OPENBLAS_NUM_THREADS=1 (see
bench/train_step.py for why) and the best OpenBLAS kernel the CPU allows (bench/peer.py). --gradient-as-bucket-view runs ours with that DDP option
(PyTorch's default, as in the reference script, is off).
"""
import argparse, json, os, statistics, subprocess, sys

from peer import describe_peer, peer_env

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
    torch_env = peer_env(threads=1)
    print("peer:", describe_peer(torch_env), flush=True)
    med = statistics.median
    results, scaling = {}, {}
    for batch in (64, 256):
        runs = {(impl, world): [] for impl in ("ours", "torch") for world in (1, 2)}
        for r in range(a.rounds):
            plan = []
            for world in (1, 2):
                ours_cmd = [ours_bin, "--world", str(world), "--batch", str(batch)]
                if a.gradient_as_bucket_view:
                    ours_cmd.append("--gradient-as-bucket-view")
                plan.append((("ours", world), ours_cmd, None))
                plan.append((("torch", world), ["/usr/bin/python3", a.reference, "--world", str(world), "--batch",
                                                str(batch), "--port", str(29700 + 2 * r + world)], torch_env))
            if r % 2:
                plan.reverse()
            for key, cmd, env in plan:
                runs[key].append(last_json(cmd, env))
        for world in (1, 2):
            ours = [x["global_samples_per_s"] for x in runs[("ours", world)]]
            torch = [x["global_samples_per_s"] for x in runs[("torch", world)]]
            results[(world, batch)] = (
                med(ours), med(torch), med([o / t for o, t in zip(ours, torch)]),
                med([x["exposed_comm_ms"] for x in runs[("ours", world)]]),
                med([x["exposed_vs_slowest_rank_ms"] for x in runs[("ours", world)]]))
        one, two = ([x["global_samples_per_s"] for x in runs[("ours", w)]] for w in (1, 2))
        scaling[batch] = [b / o for o, b in zip(one, two)]
    print("| world | batch per rank | ours samples/s | PyTorch DDP samples/s | ratio | our exposed comm ms "
          "| vs slowest rank ms |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for (world, batch), (o, t, r, e, es) in sorted(results.items()):
        print(f"| {world} | {batch} | {o:.0f} | {t:.0f} | {r:.2f} | {e:.3f} | {es:.3f} |")
        print(json.dumps({"bench": "ddp_step", "world": world, "batch": batch, "ours": o, "torch": t, "ratio": r,
                          "exposed_ms": e, "exposed_vs_slowest_ms": es}), file=sys.stderr)
    for batch in (64, 256):
        per_round = ", ".join(f"{x:.2f}" for x in scaling[batch])
        print(f"\nours, 2 ranks over 1 rank, batch {batch}: {med(scaling[batch]):.2f}x "
              f"(median of per-round ratios: {per_round})")

if __name__ == "__main__":
    main()
