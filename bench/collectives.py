"""Our gather, scatter, reduce and all_to_all against gloo's, side by side, alternating.

    bash tools/setup.sh --bench && bazel build //bench:collectives_bench
    /usr/bin/python3 bench/collectives.py --rounds 3 --worlds 2 4

Each round runs bazel-bin/bench/collectives_bench and bench/torch_collectives.py for each
world size, in alternating order. The peer runs as bench/peer.py sets it up (its best
OpenBLAS kernel, which does not matter to communication but is every peer's setting here),
one thread per rank. Reported per collective and size: median time of each, and the
median of the per-round ratios (gloo time / ours: above 1, ours is faster).
"""
import argparse, json, os, statistics, subprocess, sys

from peer import describe_peer, peer_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def lines(cmd, env=None):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return [json.loads(l) for l in out.splitlines() if l.startswith("{")]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--worlds", type=int, nargs="+", default=[2, 4])
    a = p.parse_args()
    ours_bin = os.path.join(ROOT, "bazel-bin", "bench", "collectives_bench")
    if not os.path.exists(ours_bin):
        sys.exit("collectives.py: build it first: bazel build //bench:collectives_bench")
    torch_env = peer_env(threads=1)
    print("peer:", describe_peer(torch_env), flush=True)
    for world in a.worlds:
        per = {}
        for r in range(a.rounds):
            runs = [("ours", [ours_bin, "--world", str(world)], None),
                    ("gloo", ["/usr/bin/python3", os.path.join(ROOT, "bench", "torch_collectives.py"), "--world",
                              str(world), "--port", str(29650 + r + 10 * world)], torch_env)]
            if r % 2:
                runs.reverse()
            got = {name: {(d["collective"], d["bytes"]): d["time_us"] for d in lines(cmd, env)} for name, cmd, env in runs}
            for key, ours in got["ours"].items():
                if key in got["gloo"]:
                    e = per.setdefault(key, {"ours": [], "gloo": [], "ratio": []})
                    e["ours"].append(ours)
                    e["gloo"].append(got["gloo"][key])
                    e["ratio"].append(got["gloo"][key] / ours)
        med = statistics.median
        print(f"\nworld {world}, {a.rounds} alternating rounds (medians; bytes: each rank's tensor)\n")
        print("| collective | bytes | ours (us) | gloo (us) | gloo / ours |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for (name, b) in sorted(per):
            e = per[(name, b)]
            print(f"| {name} | {b} | {med(e['ours']):.0f} | {med(e['gloo']):.0f} | {med(e['ratio']):.2f} |")


if __name__ == "__main__":
    main()
