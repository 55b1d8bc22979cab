"""The peer for bench/allreduce_nodes.py: gloo's all_reduce (sum, float32), one rank per
process started by a launcher (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT in the
environment; GLOO_SOCKET_IFNAME picks the interface). Measured exactly as
../shared/reference/torch_allreduce.py measures it; rank 0 prints one JSON line per size.

    launch --nnodes=2 --node_rank=K ... /usr/bin/python3 bench/torch_allreduce_rank.py --sizes 4096 1048576
"""
import argparse, json, statistics, time
import torch, torch.distributed as dist


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", type=int, nargs="+", default=[4096, 262144, 1 << 20, 1 << 22, 1 << 24])
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    for nbytes in a.sizes:
        n = max(1, nbytes // 4)
        t = torch.full((n,), float(rank + 1))
        for _ in range(3):
            dist.all_reduce(t)
        iters = max(3, min(200, int(2e8 / (n * 4))))
        rounds = []
        for _ in range(a.rounds):
            dist.barrier()
            s = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(t)
            rounds.append((time.perf_counter() - s) / iters)
        dt = statistics.median(rounds)
        if rank == 0:
            algbw = n * 4 / dt / 1e9
            print(json.dumps({"impl": "gloo-" + torch.__version__, "world": world, "bytes": n * 4,
                              "time_us": round(dt * 1e6, 2), "algbw_GBps": round(algbw, 4),
                              "busbw_GBps": round(algbw * 2 * (world - 1) / world, 4)}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
