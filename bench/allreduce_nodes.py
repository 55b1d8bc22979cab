"""all_reduce across emulated machines (tools/nodes.sh), ours beside gloo, on links capped
at a given rate: one rank per machine, one launcher per machine, alternating rounds.

    bash tools/setup.sh --bench && bazel build //bench:allreduce_bench //dist:launch
    /usr/bin/python3 bench/allreduce_nodes.py --nodes 2 4 --rates 1gbit 10gbit --rounds 3

Each machine is a network namespace with its own address, hostname and /dev/shm, joined to
the others by veth pairs through a bridge, every link capped in both directions by tc's
token bucket (tbf). With one rank per machine our all_reduce is the TCP ring; gloo (PyTorch
1.13, GLOO_SOCKET_IFNAME=eth0) runs its own ring. busbw = algbw * 2(n-1)/n: the ring's
physical limit is the link rate (each rank sends and receives 2(n-1)/n of the data, at
most `rate` each way). Reported per size: median busbw of each, the median of the per-round
ratios, and ours as a fraction of the link rate.
"""
import argparse, json, os, secrets, statistics, subprocess, sys

from peer import peer_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NODES = os.path.join(ROOT, "tools", "nodes.sh")


def rate_bytes_per_s(rate):
    for unit, scale in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if rate.endswith(unit):
            return float(rate[: -len(unit)]) * scale / 8
    sys.exit(f"allreduce_nodes.py: bad rate {rate}")


def run_job(env, nodes, port, program, per_node=1, extra_env=None):
    """Starts one launcher per machine (per_node ranks on each); returns rank 0's JSON lines."""
    token = secrets.token_hex(16)
    procs = []
    for k in reversed(range(nodes)):
        cmd = ["bash", NODES, "run", env["NODES_ID"], str(k), os.path.join(ROOT, "bazel-bin", "dist", "launch"),
               f"--nnodes={nodes}", f"--node_rank={k}", f"--nproc_per_node={per_node}", f"--master_addr={env['NODE0_ADDR']}",
               f"--master_port={port}", f"--job_token={token}"] + program
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      env={**job_env(), **(extra_env or {})}))
    outs = [p.communicate(timeout=900)[0] for p in procs]
    if any(p.returncode for p in procs):
        sys.exit("allreduce_nodes.py: a job failed:\n" + "\n".join(outs))
    rows = []
    for line in outs[-1].splitlines():  # node 0 started last
        if line.startswith("[rank") and not line.startswith("[rank 0]"):
            continue
        text = line.split("] ", 1)[1] if line.startswith("[rank") else line
        if text.startswith("{"):
            rows.append(json.loads(text))
    return rows


def job_env():
    e = peer_env(threads=1)  # the peer at its best (bench/peer.py); the same for ours
    e["GLOO_SOCKET_IFNAME"] = "eth0"
    e["ENGINE_SOCKET_IFNAME"] = "eth0"
    return e


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--nodes", type=int, nargs="+", default=[2, 4])
    p.add_argument("--rates", nargs="+", default=["1gbit", "10gbit"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--sizes", type=int, nargs="+", default=[4096, 262144, 1 << 20, 1 << 22, 1 << 24])
    a = p.parse_args()
    sizes = [str(s) for s in a.sizes]
    ours = [os.path.join(ROOT, "bazel-bin", "bench", "allreduce_bench"), "--launched", "--rounds", "3", "--sizes"] + sizes
    gloo = ["/usr/bin/python3", os.path.join(ROOT, "bench", "torch_allreduce_rank.py"), "--rounds", "3",
            "--sizes"] + sizes
    port = 29700
    for nodes in a.nodes:
        for rate in a.rates:
            up = subprocess.run(["bash", NODES, "up", str(nodes), rate], check=True, capture_output=True, text=True)
            env = dict(l.split("=", 1) for l in up.stdout.split())
            try:
                per = {}
                for r in range(a.rounds):
                    runs = [("ours", ours), ("gloo", gloo)]
                    if r % 2:
                        runs.reverse()
                    got = {}
                    for name, program in runs:
                        port += 1
                        got[name] = {d["bytes"]: d for d in run_job(env, nodes, port, program)}
                    for b, d in got["ours"].items():
                        e = per.setdefault(b, {"ours": [], "gloo": [], "ratio": [], "path": d["path"]})
                        e["ours"].append(d["busbw_GBps"])
                        e["gloo"].append(got["gloo"][b]["busbw_GBps"])
                        e["ratio"].append(d["busbw_GBps"] / got["gloo"][b]["busbw_GBps"])
            finally:
                subprocess.run(["bash", NODES, "down", env["NODES_ID"]], check=False)
            link = rate_bytes_per_s(rate) / 1e9
            med = statistics.median
            print(f"\n{nodes} machines x 1 rank, links capped at {rate} ({link:.3f} GB/s each way), "
                  f"{a.rounds} alternating rounds (medians); ours runs the {per[min(per)]['path']} all-reduce\n")
            print("| bytes | ours busbw GB/s | gloo busbw GB/s | ours / gloo | ours / link |")
            print("| ---: | ---: | ---: | ---: | ---: |")
            for b in sorted(per):
                e = per[b]
                print(f"| {b} | {med(e['ours']):.4f} | {med(e['gloo']):.4f} | {med(e['ratio']):.2f} | "
                      f"{100 * med(e['ours']) / link:.0f}% |")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
