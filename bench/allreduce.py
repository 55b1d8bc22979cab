"""Our all_reduce against gloo's, side by side, alternating, plus the loopback ceiling.

    bash tools/setup.sh --bench && bazel build //bench:allreduce_bench
    /usr/bin/python3 bench/allreduce.py --rounds 5

Each round runs bazel-bin/bench/allreduce_bench (which first measures one TCP stream over
loopback) and ../shared/reference/torch_allreduce.py for each world size, in alternating
order. Reported per size: median busbw of each, the median of the per-round ratios, our
busbw as a fraction of the same round's loopback bandwidth, and for 4 KiB the latency
ratio. busbw = algbw * 2(n-1)/n as nccl-tests defines it; GB = 1e9 bytes.
"""
import argparse, json, os, statistics, subprocess, sys

from peer import describe_peer, peer_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def lines(cmd, env=None):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return [json.loads(l) for l in out.splitlines() if l.startswith("{")]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--worlds", type=int, nargs="+", default=[2, 4])
    p.add_argument("--reference", default=os.path.join(ROOT, "..", "shared", "reference", "torch_allreduce.py"))
    a = p.parse_args()
    ours_bin = os.path.join(ROOT, "bazel-bin", "bench", "allreduce_bench")
    if not os.path.exists(ours_bin):
        sys.exit("allreduce.py: build it first: bazel build //bench:allreduce_bench")
    env_port = 29600
    torch_env = peer_env(threads=1)
    print("peer:", describe_peer(torch_env), flush=True)
    for world in a.worlds:
        per = {}  # bytes -> lists
        for r in range(a.rounds):
            runs = [("ours", [ours_bin, "--world", str(world)], None),
                    ("gloo", ["/usr/bin/python3", a.reference, "--world", str(world), "--port", str(env_port + r)],
                     torch_env)]
            if r % 2:
                runs.reverse()
            got = {name: lines(cmd, env) for name, cmd, env in runs}
            loop = [d["GBps"] for d in got["ours"] if d["impl"].startswith("loopback")][0]
            ours = {d["bytes"]: d for d in got["ours"] if "busbw_GBps" in d}
            gloo = {d["bytes"]: d for d in got["gloo"]}
            for b in ours:
                if b not in gloo:
                    continue
                e = per.setdefault(b, {"ours": [], "gloo": [], "ratio": [], "of_loop": [], "lat": [], "loop": []})
                e["ours"].append(ours[b]["busbw_GBps"])
                e["gloo"].append(gloo[b]["busbw_GBps"])
                e["ratio"].append(ours[b]["busbw_GBps"] / gloo[b]["busbw_GBps"])
                e["of_loop"].append(ours[b]["busbw_GBps"] / loop)
                e["lat"].append(ours[b]["time_us"] / gloo[b]["time_us"])
                e["loop"].append(loop)
        med = statistics.median
        print(f"\nworld {world}, {a.rounds} alternating rounds (medians)\n")
        print("| bytes | ours busbw GB/s | gloo busbw GB/s | ratio | loopback GB/s | ours / loopback | time ratio |")
        print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for b in sorted(per):
            e = per[b]
            print(f"| {b} | {med(e['ours']):.3f} | {med(e['gloo']):.3f} | {med(e['ratio']):.2f} | {med(e['loop']):.2f} | "
                  f"{100 * med(e['of_loop']):.0f}% | {med(e['lat']):.3f} |")
            print(json.dumps({"bench": "allreduce", "world": world, "bytes": b, "ours_busbw": med(e["ours"]),
                              "gloo_busbw": med(e["gloo"]), "ratio": med(e["ratio"]), "of_loopback": med(e["of_loop"]),
                              "time_ratio": med(e["lat"])}), file=sys.stderr)
        sys.stdout.flush()


if __name__ == "__main__":
    main()
