"""PyTorch's training step of the lessons' CNN on the CPU, the peer of
`bazel-bin/bench/train_step --model cnn` (bench/train_step.py --model cnn runs both):
conv(1->32, 3x3, pad 1)-BatchNorm-ReLU-maxpool 2, conv(32->64)-BatchNorm-ReLU-maxpool 2,
flatten, linear 3136->128, ReLU, linear 128->10; SGD lr 0.01 momentum 0.9; random data.
--autocast bf16 runs the forward and the loss under torch.autocast("cpu", dtype=torch.bfloat16),
as PyTorch's mixed-precision recipe does (the backward outside it).

    /usr/bin/python3 bench/torch_cnn_step.py --batch 64 --threads 1 [--autocast bf16]

Prints one JSON line: the median step time over the timed rounds, and whether this
PyTorch has oneDNN (its fast CPU convolutions).
"""
import argparse, json, statistics, time
import torch

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=64)
p.add_argument("--threads", type=int, default=1)
p.add_argument("--steps", type=int, default=30, help="steps per timed round")
p.add_argument("--rounds", type=int, default=5)
p.add_argument("--autocast", choices=["off", "bf16"], default="off")
a = p.parse_args()

torch.set_num_threads(a.threads)
torch.manual_seed(0)
nn = torch.nn
model = nn.Sequential(
    nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
model.train()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x = torch.randn(a.batch, 1, 28, 28)
y = torch.randint(0, 10, (a.batch,))


def step():
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.autocast == "bf16"):
        loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()


for _ in range(5):
    step()
times = []
for _ in range(a.rounds):
    t = time.perf_counter()
    for _ in range(a.steps):
        step()
    times.append((time.perf_counter() - t) / a.steps)
s = statistics.median(times)
print(json.dumps({"impl": "pytorch-" + torch.__version__, "model": "cnn-conv32-conv64-fc128-fc10", "batch": a.batch,
                  "threads": a.threads, "autocast": a.autocast, "onednn": torch.backends.mkldnn.is_available(),
                  "step_ms": round(s * 1e3, 4), "samples_per_s": round(a.batch / s, 1)}))
