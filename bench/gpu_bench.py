"""PyTorch CUDA peer of bench/gpu_bench.cc: the same kernels, GEMM and training steps,
timed the same way (CUDA events around many repetitions, median of rounds), printed as
the same JSON lines.

    python3 bench/gpu_bench.py [--quick]
"""
import json
import statistics
import sys

import torch
import torch.nn as nn


def time_ms(f, reps, rounds=7):
    for _ in range(3):
        f()
    ms = []
    for _ in range(rounds):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            f()
        stop.record()
        stop.synchronize()
        ms.append(start.elapsed_time(stop) / reps)
    return statistics.median(ms)


def emit(**kv):
    print(json.dumps({"impl": "pytorch", **kv}), flush=True)


def bandwidth(n):
    g = torch.Generator(device="cuda").manual_seed(1)
    a = torch.randn(n, device="cuda", generator=g)
    b = torch.randn(n, device="cuda", generator=g)
    out = torch.empty(n, device="cuda")
    inplace = torch.randn(n, device="cuda", generator=g)
    nbytes = n * 4
    copy_ms = time_ms(lambda: out.copy_(a), 20)
    copy_gbs = 2 * nbytes / copy_ms / 1e6
    kernels = [("copy", 2, lambda: out.copy_(a)), ("add", 3, lambda: a + b), ("relu", 2, lambda: torch.relu(a)),
               ("mul_", 2, lambda: inplace.mul_(1.0000001)), ("sum", 1, lambda: a.sum())]
    for name, traffic, f in kernels:
        ms = time_ms(f, 20)
        gbs = traffic * nbytes / ms / 1e6
        emit(bench="bandwidth", kernel=name, numel=n, ms=round(ms, 4), GBps=round(gbs, 1), of_copy=round(gbs / copy_gbs, 3))


def gemm(n):
    a, b = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
    ms = time_ms(lambda: a @ b, 5)
    emit(bench="gemm", n=n, cublas_tflops=round(2 * n ** 3 / ms / 1e9, 2))
    for name, dtype in (("bfloat16", torch.bfloat16), ("float16", torch.float16)):
        ah, bh = a.to(dtype), b.to(dtype)
        ms = time_ms(lambda: ah @ bh, 5)
        emit(bench="gemm16", dtype=name, n=n, tflops=round(2 * n ** 3 / ms / 1e9, 2))


def make_model(name):
    if name == "mlp":
        return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 3, 1, 1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3, 1, 1), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def train_step(name, batch, steps, autocast=False):
    """name "mlp-ddp": the MLP in DistributedDataParallel over nccl at world size 1.
    autocast: forward and loss under torch.autocast("cuda", dtype=torch.bfloat16)."""
    torch.manual_seed(0)
    torch.cuda.reset_peak_memory_stats()
    ddp = name == "mlp-ddp"
    model = make_model("mlp" if ddp else name).cuda()
    if ddp:
        import torch.distributed as dist
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29517", rank=0, world_size=1)
        model = nn.parallel.DistributedDataParallel(model, device_ids=[0])
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    shape = (batch, 1, 28, 28) if name == "cnn" else (batch, 784)
    x = torch.randn(*shape, device="cuda")
    y = torch.randint(0, 10, (batch,), device="cuda")
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    for _ in range(10):
        step()
    ms = time_ms(step, steps, 5)
    emit(bench="train_step", model=name, autocast="bf16" if autocast else "off", batch=batch, step_ms=round(ms, 4),
         peak_allocated_mb=round(torch.cuda.max_memory_allocated() / 2 ** 20, 1))
    if ddp:
        del model
        torch.distributed.destroy_process_group()


def conv_layer(batch, cin, cout, size):
    conv = nn.Conv2d(cin, cout, 3, 1, 1).cuda()
    x = torch.randn(batch, cin, size, size, device="cuda")
    xg = x.clone().requires_grad_(True)
    fwd = time_ms(lambda: conv(x), 20)
    both = time_ms(lambda: conv(xg).sum().backward(), 20)
    emit(bench="conv_layer", layer=f"{cin}x{cout}@{size}", batch=batch, forward_ms=round(fwd, 4),
         forward_backward_ms=round(both, 4))


def main():
    quick = "--quick" in sys.argv
    if not torch.cuda.is_available():
        print("SKIPPED gpu_bench.py: torch sees no GPU")
        return
    # PyTorch's defaults, stated: float32 matmuls in full precision (no TF32), cuDNN on.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    emit(bench="device", name=torch.cuda.get_device_name(0), torch=torch.__version__)
    bandwidth(1 << 20 if quick else 1 << 28)
    gemm(256 if quick else 4096)
    conv_layer(256, 1, 32, 28)
    conv_layer(256, 32, 64, 14)
    for model in ("mlp", "cnn", "mlp-ddp"):
        for batch in (64, 256):
            train_step(model, batch, 5 if quick else 50)
    for model in ("mlp", "cnn"):
        for batch in (64, 256):
            train_step(model, batch, 5 if quick else 50, autocast=True)


if __name__ == "__main__":
    main()
