"""DDP across emulated machines on a capped link: the measured step beside what the
alpha-beta model fitted on that same link predicts, with and without gradient compression.

    bash tools/setup.sh --bench && bazel build //bench:ddp_step //bench:allreduce_bench //dist:launch
    /usr/bin/python3 bench/ddp_nodes.py --rates 1gbit 10gbit --rounds 3
    /usr/bin/python3 bench/ddp_nodes.py --one-host --rounds 3     # the same hooks on one machine

Two machines (tools/nodes.sh: network namespaces, own address, hostname and /dev/shm),
one rank each, so every all-reduce is the TCP ring over the capped veth link. Per rate:

1. Fit. bench/allreduce_bench times all_reduce at 64 KiB..4 MiB; a least-squares line
   T(S) = a + S b gives the model (for 2 ranks a = 2 alpha, b = beta: each rank sends S).
2. Measure. bench/ddp_step (the recap MLP 784-256-256-10, batch 64 per rank) with each
   communication hook, the hooks' order alternating between rounds: the step, the same step
   under no_sync (no communication: the compute), the buckets' sizes and the bytes a rank
   sends per step.
3. Predict. step = no_sync step + sum over buckets of T(bytes that bucket puts on the wire)
   (no overlap: with the default 1 MiB first bucket this MLP's 1.08 MB of gradients form
   one bucket, which is ready only when backward ends, so nothing can overlap it). The
   compressing hooks' wire bytes are half the bucket's; their rounding work is not in the
   model (it is the difference between measured and predicted). PowerSGD runs several
   collectives per bucket; it is measured, not predicted.

Beside the prediction: the link's floor, the bytes a rank sends per step at the link's
rate, which no step can beat. The emulated link is a token bucket (tc tbf, depth printed):
while the rank computes, the idle link banks up to `burst` bytes that then leave at once,
which a wire cannot do, so where the compute is shorter than burst / rate a step can come
in under the prediction, down to the floor. NODES_BURST=<bytes> sets the depth.
"""
import argparse, json, os, statistics, subprocess, sys

from allreduce_nodes import NODES, ROOT, rate_bytes_per_s, run_job

HOOKS = ["none", "bf16", "fp16", "powersgd"]
FIT_SIZES = [1 << 16, 1 << 18, 1 << 19, 1 << 20, 1 << 21, 1 << 22]


def fit_line(points):
    """Least squares T = a + b S over (S, T) points; returns a, b."""
    n = len(points)
    sx = sum(s for s, _ in points)
    sy = sum(t for _, t in points)
    sxx = sum(s * s for s, _ in points)
    sxy = sum(s * t for s, t in points)
    b = (n * sxy - sx * sy) / (n * sxx - sx * sx)
    return (sy - b * sx) / n, b


def wire_bytes(bucket, hook):
    return bucket // 2 if hook in ("bf16", "fp16") else bucket


def measure_link(env, port, rounds):
    prog = [os.path.join(ROOT, "bazel-bin", "bench", "allreduce_bench"), "--launched", "--rounds", str(rounds),
            "--sizes"] + [str(s) for s in FIT_SIZES]
    rows = run_job(env, 2, port, prog)
    return [(r["bytes"], r["time_us"] * 1e-6) for r in rows], rows[0]["path"]


def measure_hooks(env, port, rounds, steps):
    per = {h: [] for h in HOOKS}
    for r in range(rounds):
        order = HOOKS if r % 2 == 0 else HOOKS[::-1]
        for hook in order:
            port += 1
            prog = [os.path.join(ROOT, "bazel-bin", "bench", "ddp_step"), "--launched", "--batch", "64", "--steps",
                    str(steps), "--rounds", "3", "--hook", hook]
            per[hook].append(run_job(env, 2, port, prog)[-1])
    return per, port


def report(title, per, line=None, rate=None):
    med = statistics.median
    print(f"\n{title}\n")
    cols = "| hook | algorithm | bytes sent per step | step ms | no_sync step ms | samples/s (2 ranks) |"
    if line:
        cols += " predicted ms | measured / predicted | link floor ms | measured / floor |"
    print(cols)
    print("|" + " --- |" * (cols.count("|") - 1))
    for hook in HOOKS:
        runs = per[hook]
        step = med([x["step_ms"] for x in runs])
        nosync = med([x["nosync_step_ms"] for x in runs])
        row = (f"| {hook} | {runs[0]['algorithm']} | {runs[0]['bytes_sent_per_step']:,} | {step:.3f} | "
               f"{nosync:.3f} | {med([x['global_samples_per_s'] for x in runs]):,.0f} |")
        if line and hook != "powersgd":
            a, b = line
            pred = [x["nosync_step_ms"] + 1e3 * sum(a + b * wire_bytes(s, hook) for s in x["bucket_bytes"])
                    for x in runs]
            row += f" {med(pred):.3f} | {med([x['step_ms'] / p for x, p in zip(runs, pred)]):.3f} |"
        elif line:
            row += " - | - |"
        if line:
            floor = 1e3 * runs[0]["bytes_sent_per_step"] / rate
            row += f" {floor:.3f} | {step / floor:.2f} |"
        print(row)
    print("\nbuckets (bytes):", per["none"][0]["bucket_bytes"])
    sys.stdout.flush()


def one_host(rounds, steps):
    for algo in ("", "ring"):
        env = dict(os.environ)
        if algo:
            env["ENGINE_ALLREDUCE"] = algo
        per = {h: [] for h in HOOKS}
        for r in range(rounds):
            for hook in (HOOKS if r % 2 == 0 else HOOKS[::-1]):
                cmd = [os.path.join(ROOT, "bazel-bin", "bench", "ddp_step"), "--world", "2", "--batch", "64",
                       "--steps", str(steps), "--rounds", "3", "--hook", hook]
                out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
                per[hook].append([json.loads(l) for l in out.splitlines() if l.startswith("{")][-1])
        report(f"One machine, 2 ranks, ENGINE_ALLREDUCE={algo or 'unset (shared memory)'}, {rounds} rounds", per)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rates", nargs="+", default=["1gbit", "10gbit"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--one-host", action="store_true", help="run the hooks on one machine instead")
    a = p.parse_args()
    for b in ("ddp_step", "allreduce_bench"):
        if not os.path.exists(os.path.join(ROOT, "bazel-bin", "bench", b)):
            sys.exit(f"ddp_nodes.py: build it first: bazel build //bench:{b} //dist:launch")
    if a.one_host:
        return one_host(a.rounds, a.steps)
    port = 29900
    for rate in a.rates:
        up = subprocess.run(["bash", NODES, "up", "2", rate], check=True, capture_output=True, text=True)
        env = dict(l.split("=", 1) for l in up.stdout.split())
        try:
            port += 1
            points, path = measure_link(env, port, a.rounds)
            line = fit_line(points)
            per, port = measure_hooks(env, port + 1, a.rounds, a.steps)
        finally:
            subprocess.run(["bash", NODES, "down", env["NODES_ID"]], check=False)
        link = rate_bytes_per_s(rate)
        print(f"\n2 machines x 1 rank, links capped at {rate} (token bucket depth {env['NODES_BURST']} bytes, "
              f"{1e3 * int(env['NODES_BURST']) / link:.1f} ms of the rate): all_reduce ({path}) fitted over "
              f"{FIT_SIZES[0]}..{FIT_SIZES[-1]} bytes: T(S) = {line[0] * 1e6:.1f} us + S / {1e-9 / line[1]:.3f} GB/s "
              f"(the link: {link / 1e9:.3f} GB/s each way)")
        for s, t in points:
            print(f"  {s:>8} B: measured {t * 1e6:9.1f} us, line {(line[0] + line[1] * s) * 1e6:9.1f} us")
        report(f"DDP step, recap MLP, batch 64 per rank, {a.rounds} rounds alternating the hooks (medians)", per, line,
               link)


if __name__ == "__main__":
    main()
