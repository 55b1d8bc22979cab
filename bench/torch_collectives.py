"""The peer for bench/collectives.py: gloo's gather, scatter, reduce and all_to_all_single
(float32, sum for reduce), one process per rank (mp.spawn), timed exactly as
bench/collectives_bench.cc times ours; rank 0 prints one JSON line per collective and size.

    /usr/bin/python3 bench/torch_collectives.py --world 4 --port 29650
"""
import argparse, json, os, statistics, time
import torch, torch.distributed as dist, torch.multiprocessing as mp


def call(name, t, many, out):
    if name == "gather":
        dist.gather(t, many if dist.get_rank() == 0 else None, dst=0)
    elif name == "scatter":
        dist.scatter(out, many if dist.get_rank() == 0 else None, src=0)
    elif name == "reduce":
        dist.reduce(t, dst=0)
    else:
        dist.all_to_all_single(out, t)


def rank_main(rank, world, port, sizes, rounds):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    for name in ["gather", "scatter", "reduce", "all_to_all"]:
        for nbytes in sizes:
            n = max(world, nbytes // 4 // world * world)
            t, out = torch.full((n,), float(rank + 1)), torch.empty(n)
            many = [torch.full((n,), float(r)) for r in range(world)] if rank == 0 else None
            if name == "gather" and rank == 0:
                many = [torch.empty(n) for _ in range(world)]
            for _ in range(3):
                call(name, t, many, out)
            iters = max(3, min(100, int(1e8 / (n * 4))))
            times = []
            for _ in range(rounds):
                dist.barrier()
                s = time.perf_counter()
                for _ in range(iters):
                    call(name, t, many, out)
                dist.barrier()
                times.append((time.perf_counter() - s) / iters)
            if rank == 0:
                print(json.dumps({"impl": "gloo-" + torch.__version__, "collective": name, "world": world,
                                  "bytes": n * 4, "time_us": round(statistics.median(times) * 1e6, 2)}), flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--port", type=int, default=29650)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--sizes", type=int, nargs="+", default=[65536, 1 << 20, 1 << 24])
    a = p.parse_args()
    mp.spawn(rank_main, args=(a.world, a.port, a.sizes, a.rounds), nprocs=a.world)


if __name__ == "__main__":
    main()
