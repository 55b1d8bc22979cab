"""The hierarchical collectives against a flat ring across emulated machines with several
ranks each: time and the bytes rank 0 (a machine's leader) sends per call.

    bash tools/setup.sh --bench && bazel build //bench:collectives_bench //bench:allreduce_bench //dist:launch
    /usr/bin/python3 bench/hierarchical_nodes.py --rate 1gbit --rounds 3

2 machines x 2 ranks (tools/nodes.sh), links capped at --rate. Each collective runs twice
per round, as chosen at setup (hierarchical: shared memory within a machine, the leaders'
ring between machines) and with ENGINE_ALLREDUCE=ring (every rank in one TCP ring, as the
job would run without topology), the order alternating between rounds. Sizes are what each
rank holds: all_gather's input, reduce_scatter's output, the broadcast, reduce (to rank 0)
and all_reduce tensor. The link's bound for each: the bytes that must cross a machine's
link at its rate.
"""
import argparse, os, statistics, subprocess, sys

from allreduce_nodes import NODES, ROOT, rate_bytes_per_s, run_job

OPS = ["all_gather", "reduce_scatter", "broadcast", "reduce"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rate", default="1gbit")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--sizes", type=int, nargs="+", default=[1 << 18, 1 << 20, 1 << 22])
    a = p.parse_args()
    for b in ("collectives_bench", "allreduce_bench"):
        if not os.path.exists(os.path.join(ROOT, "bazel-bin", "bench", b)):
            sys.exit(f"hierarchical_nodes.py: build it first: bazel build //bench:{b} //dist:launch")
    sizes = [str(s) for s in a.sizes]
    coll = [os.path.join(ROOT, "bazel-bin", "bench", "collectives_bench"), "--launched", "--rounds", "3",
            "--ops", ",".join(OPS), "--sizes"] + sizes
    allred = [os.path.join(ROOT, "bazel-bin", "bench", "allreduce_bench"), "--launched", "--rounds", "3",
              "--sizes"] + sizes
    up = subprocess.run(["bash", NODES, "up", "2", a.rate], check=True, capture_output=True, text=True)
    env = dict(l.split("=", 1) for l in up.stdout.split())
    per = {}
    port = 29750
    try:
        for r in range(a.rounds):
            algos = ["auto", "ring"] if r % 2 == 0 else ["ring", "auto"]
            for algo in algos:
                extra = {"ENGINE_ALLREDUCE": algo}
                port += 1
                for row in run_job(env, 2, port, coll, per_node=2, extra_env=extra):
                    per.setdefault((row["collective"], row["bytes"], algo), []).append(row)
                port += 1
                for row in run_job(env, 2, port, allred, per_node=2, extra_env=extra):
                    row["collective"] = "all_reduce"
                    row["algorithm"] = row["path"]
                    per.setdefault(("all_reduce", row["bytes"], algo), []).append(row)
    finally:
        subprocess.run(["bash", NODES, "down", env["NODES_ID"]], check=False)
    med = statistics.median
    link = rate_bytes_per_s(a.rate)
    print(f"\n2 machines x 2 ranks, links capped at {a.rate} ({link / 1e9:.3f} GB/s each way), {a.rounds} "
          f"alternating rounds (medians)\n")
    print("| collective | bytes per rank | hierarchical us | flat ring us | ring / hierarchical | "
          "rank 0 sends (hier.) | rank 0 sends (ring) | hierarchical / link bound |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for op in OPS + ["all_reduce"]:
        for b in a.sizes:
            h, f = per[(op, b, "auto")], per[(op, b, "ring")]
            th, tf = med([x["time_us"] for x in h]), med([x["time_us"] for x in f])
            ratio = med([y["time_us"] / x["time_us"] for x, y in zip(h, f)])
            # What must cross machine 0's link one way: all_gather/reduce_scatter the other
            # machine's share of the result (2 ranks x b); broadcast one copy; reduce the other
            # machine's partial result, one copy into machine 0; all_reduce the ring's
            # 2(m-1)/m over m = 2 leaders of b.
            must = 2 * b if op in ("all_gather", "reduce_scatter") else b
            bound_us = must / link * 1e6
            sent_h = h[0].get("bytes_sent", "-")
            sent_f = f[0].get("bytes_sent", "-")
            print(f"| {op} ({h[0]['algorithm']} / {f[0]['algorithm']}) | {b:,} | {th:,.0f} | {tf:,.0f} | {ratio:.2f} | "
                  f"{sent_h if isinstance(sent_h, str) else f'{sent_h:,}'} | "
                  f"{sent_f if isinstance(sent_f, str) else f'{sent_f:,}'} | {th / bound_us:.2f} |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
