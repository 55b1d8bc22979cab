"""The recap's PyTorch twin (lesson 2, step 14): the same training in PyTorch, step for step.

Given the folder the recap wrote with --twin DIR (run.json, init.safetensors, each rank's
sample order), it builds the same model in PyTorch with the same parameter names, loads
the same step-0 weights, and trains with the same optimizer (SGD, momentum 0.9), the same
cosine learning-rate schedule, and the same batches in the same order: in one process for
a world size of 1, and with PyTorch's DistributedDataParallel over gloo, one process per
rank, otherwise. It writes OUT/losses_rank{r}.txt and OUT/final.safetensors, then compares:
the final weights, and the predicted class of every test image under both final models.

Then, at the few steps the recap recorded whole (run.json's "probe_steps"), it takes one
step from the engine's own state there (weights and momentum) on the same batches, and
compares that step's loss and the weights after it with the engine's: each step agrees to
float32's last bits even where the two free-running runs have drifted far apart.

Run once more with its kernels held to AVX2 (as on a CPU without AVX-512) and given
--baseline OUT, it is PyTorch with only the order of its sums changed, and it also compares
its final model with the first run's: how far PyTorch drifts from itself, the yardstick
for the engine's drift.

    /usr/bin/python3 lessons/common/torch_twin.py DIR OUT [--data /usr/share/datasets/fashion-mnist]
    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=Haswell \
        /usr/bin/python3 lessons/common/torch_twin.py DIR OUT2 --baseline OUT

/usr/bin/python3 is Debian's Python, which has Debian's PyTorch (bash tools/setup.sh --bench).
"""
import argparse
import gzip
import json
import math
import os
import socket
import struct
import sys
import time

try:
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import torch.nn as nn
except ImportError as e:
    sys.exit(f"torch_twin.py: {sys.executable} cannot import {e.name}: run it with Debian's Python, "
             "/usr/bin/python3, after `bash tools/setup.sh --bench` (which installs python3-torch)")


# ---- safetensors, read and written by hand (the format: u64 header length, JSON, data)

def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        dtype = {"F32": np.float32, "I64": np.int64}[e["dtype"]]
        a, b = e["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(data[a:b], dtype=dtype).reshape(e["shape"]).copy())
    return out


def save_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        a = tensors[name].detach().contiguous().numpy()
        kind = {np.dtype(np.float32): "F32", np.dtype(np.int64): "I64"}[a.dtype]
        header[name] = {"dtype": kind, "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        blobs.append(a.tobytes())
        offset += a.nbytes
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


# ---- the data, normalised exactly as the engine does (float32: x * (1/255), then (x - mean) / std)

def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    return np.frombuffer(raw[4 + 4 * ndim:], dtype=np.uint8).reshape(dims)


def fashion_mnist(root, train, mean, std):
    prefix = "train" if train else "t10k"
    x = read_idx(os.path.join(root, prefix + "-images-idx3-ubyte.gz")).astype(np.float32) * (np.float32(1) / np.float32(255))
    x = (x - np.float32(mean)) / np.float32(std)
    y = read_idx(os.path.join(root, prefix + "-labels-idx1-ubyte.gz")).astype(np.int64)
    return torch.from_numpy(x.reshape(-1, 1, 28, 28).copy()), torch.from_numpy(y.copy())


# ---- the models, with the engine's layer order (so the parameter names are the same)

def make_model(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                             nn.Linear(256, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 3, 1, 1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, 1, 1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def load_engine_weights(model, path):
    load_engine_weights_from(model, load_safetensors(path), path)


def load_engine_weights_from(model, tensors, where):
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    missing = [k for k in missing if not k.endswith("num_batches_tracked")]  # PyTorch's own counter
    if missing or unexpected:
        sys.exit(f"torch_twin: {where} does not fit the model: missing {missing}, unexpected {unexpected}")


# ---- the training, per rank

def learning_rate(run, step):
    """The engine's cosine schedule (13_recap/schedule.h, no warm-up) at a step of the run."""
    return run["lr"] * 0.5 * (1 + math.cos(math.pi * step / (run["epochs"] * run["steps_per_epoch"])))


def batch_indices(run, orders, step):
    """This rank's sample indices for a step of the run, from its recorded order."""
    epoch, b = divmod(step, run["steps_per_epoch"])
    return torch.tensor(orders[epoch][b * run["batch"]:(b + 1) * run["batch"]])


def max_difference(ours, theirs):
    """Largest |ours - theirs| over the float32 tensors, and the largest |ours| (the scale)."""
    worst = scale = 0.0
    for name, a in ours.items():
        if a.dtype == torch.float32:
            worst = max(worst, (a - theirs[name]).abs().max().item())
            scale = max(scale, a.abs().max().item())
    return worst, scale


def train(rank, run, twin_dir, out_dir, port):
    torch.set_num_threads(run.get("threads", 1))
    world = run["world"]
    if world > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    x, y = fashion_mnist(run["data"], True, run["mean"], run["std"])
    x, y = x[:run["train_limit"]], y[:run["train_limit"]]
    model = make_model(run["model"])
    load_engine_weights(model, os.path.join(twin_dir, "init.safetensors"))
    net = nn.parallel.DistributedDataParallel(model) if world > 1 else model
    opt = torch.optim.SGD(net.parameters(), lr=run["lr"], momentum=run["momentum"])
    with open(os.path.join(twin_dir, f"order_rank{rank}.txt")) as f:
        orders = [[int(i) for i in line.split()] for line in f]
    losses = []
    t0 = time.perf_counter()
    for step in range(run["epochs"] * run["steps_per_epoch"]):
        losses.append(train_step(run, orders, step, x, y, net, opt))
    seconds = time.perf_counter() - t0
    with open(os.path.join(out_dir, f"losses_rank{rank}.txt"), "w") as f:
        f.writelines(f"{l:.9g}\n" for l in losses)
    if rank == 0:
        save_safetensors(os.path.join(out_dir, "final.safetensors"), model.state_dict())
        with open(os.path.join(out_dir, "time.json"), "w") as f:
            json.dump({"seconds": seconds}, f)
    one_step_from_engine_state(rank, run, twin_dir, out_dir, x, y, model, net, opt, orders)
    if world > 1:
        dist.destroy_process_group()


def train_step(run, orders, step, x, y, net, opt):
    """One optimizer step of the run on this rank's batch, at the engine's learning rate."""
    idx = batch_indices(run, orders, step)
    for group in opt.param_groups:  # the engine's cosine schedule, step by step
        group["lr"] = learning_rate(run, step)
    opt.zero_grad()
    loss = nn.functional.cross_entropy(net(x[idx]), y[idx])
    loss.backward()
    opt.step()
    return loss.item()


def one_step_from_engine_state(rank, run, twin_dir, out_dir, x, y, model, net, opt, orders):
    """At each probe step: the engine's weights and momentum before it, one step on the same
    batch. Every rank writes "step loss" lines to OUT/one_step_rank{r}.txt; rank 0 compares
    the weights after the step with the engine's (OUT/one_step_weights.json)."""
    losses, weights = [], []
    for step in run.get("probe_steps", []):
        saved = load_safetensors(os.path.join(twin_dir, f"probe_step{step}.safetensors"))
        part = lambda prefix: {k[len(prefix):]: v for k, v in saved.items() if k.startswith(prefix)}
        before, momentum = part("before."), part("optimizer.state.")
        load_engine_weights_from(model, before, f"probe_step{step}")
        for i, p in enumerate(model.parameters()):
            opt.state[p]["momentum_buffer"] = momentum[f"{i}.momentum_buffer"].clone()
        losses.append(f"{step} {train_step(run, orders, step, x, y, net, opt):.9g}\n")
        if rank == 0:
            ours = part("after.")
            worst, scale = max_difference(ours, model.state_dict())
            moved, _ = max_difference(ours, before)
            weights.append({"step": step, "weights_rel_difference": worst / scale,
                            "update_rel_difference": worst / max(moved, 1e-30)})
    with open(os.path.join(out_dir, f"one_step_rank{rank}.txt"), "w") as f:
        f.writelines(losses)
    if rank == 0:
        with open(os.path.join(out_dir, "one_step_weights.json"), "w") as f:
            json.dump(weights, f)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- the comparison of the two final models

def pytorch_final_model(run, out_dir):
    model = make_model(run["model"])
    model.load_state_dict(load_safetensors(os.path.join(out_dir, "final.safetensors")), strict=False)
    return model.eval()


def compare(run, twin_dir, out_dir, baseline_dir):
    ours, theirs = make_model(run["model"]), pytorch_final_model(run, out_dir)
    load_engine_weights(ours, os.path.join(twin_dir, "final.safetensors"))
    worst, scale = max_difference(theirs.state_dict(), ours.state_dict())  # scale: PyTorch's weights
    x, y = fashion_mnist(run["data"], False, run["mean"], run["std"])
    ours.eval()
    with torch.no_grad():
        p, q = ours(x).argmax(1), theirs(x).argmax(1)
    result = {"max_abs_weight_difference": worst, "max_rel_weight_difference": worst / scale,
              "same_prediction_fraction": (p == q).float().mean().item(), "test_images": len(y),
              "accuracy_engine": (p == y).float().mean().item(), "accuracy_pytorch": (q == y).float().mean().item(),
              "one_step": compare_one_step(run, twin_dir, out_dir)}
    if baseline_dir:  # this PyTorch run's final model against another PyTorch run's
        base = pytorch_final_model(run, baseline_dir)
        worst, scale = max_difference(base.state_dict(), theirs.state_dict())
        with torch.no_grad():
            b = base(x).argmax(1)
        result["against_pytorch_baseline"] = {"max_rel_weight_difference": worst / scale,
                                              "same_prediction_fraction": (b == q).float().mean().item()}
    return result


def read_losses(path):
    with open(path) as f:
        return [float(line) for line in f]


def compare_one_step(run, twin_dir, out_dir):
    """The probe steps: the one-step losses (every rank) and weights (rank 0) against the
    engine's, beside how far the free-running runs are apart at those steps."""
    one = free = 0.0
    for rank in range(run["world"]):
        ours = read_losses(os.path.join(twin_dir, f"losses_rank{rank}.txt"))
        free_running = read_losses(os.path.join(out_dir, f"losses_rank{rank}.txt"))
        with open(os.path.join(out_dir, f"one_step_rank{rank}.txt")) as f:
            for line in f:
                step, loss = int(line.split()[0]), float(line.split()[1])
                one = max(one, abs(loss - ours[step]) / abs(ours[step]))
                free = max(free, abs(free_running[step] - ours[step]) / abs(ours[step]))
    with open(os.path.join(out_dir, "one_step_weights.json")) as f:
        weights = json.load(f)
    return {"steps": run.get("probe_steps", []), "loss_rel_difference": one, "free_running_loss_rel_difference": free,
            "weights_rel_difference": max([w["weights_rel_difference"] for w in weights], default=0.0),
            "update_rel_difference": max([w["update_rel_difference"] for w in weights], default=0.0)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("twin_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--data", default=os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist"))
    ap.add_argument("--threads", type=int, default=1,
                    help="PyTorch's threads per process: another value changes only the order of its sums")
    ap.add_argument("--baseline", metavar="OUT1", default="",
                    help="the folder of another PyTorch run of the same DIR: compare the final models too")
    a = ap.parse_args()
    with open(os.path.join(a.twin_dir, "run.json")) as f:
        run = json.load(f)
    run["data"] = a.data
    run["threads"] = a.threads
    os.makedirs(a.out_dir, exist_ok=True)
    port = free_port()
    if run["world"] == 1:
        train(0, run, a.twin_dir, a.out_dir, port)
    else:
        mp.spawn(train, args=(run, a.twin_dir, a.out_dir, port), nprocs=run["world"])
    result = compare(run, a.twin_dir, a.out_dir, a.baseline)
    with open(os.path.join(a.out_dir, "time.json")) as f:
        result["pytorch_seconds"] = json.load(f)["seconds"]
    result["pytorch"] = torch.__version__
    with open(os.path.join(a.out_dir, "compare.json"), "w") as f:
        json.dump(result, f)
    print("torch_twin: " + json.dumps(result))
    o = result["one_step"]
    if o["steps"]:
        print(f"one step from the engine's own state at steps {', '.join(map(str, o['steps']))}: losses within "
              f"{o['loss_rel_difference']:.2e} (relative), weights after it within "
              f"{o['weights_rel_difference']:.2e} of their largest value ({o['update_rel_difference']:.2e} of "
              f"the step's largest change); the free-running runs differ there by up to "
              f"{o['free_running_loss_rel_difference']:.2e}")
    if a.baseline:
        b = result["against_pytorch_baseline"]
        print(f"PyTorch in {os.path.basename(os.path.normpath(a.out_dir))} against PyTorch in "
              f"{os.path.basename(os.path.normpath(a.baseline))}: final weights within "
              f"{b['max_rel_weight_difference']:.2e} of their largest value, the same class for "
              f"{100 * b['same_prediction_fraction']:.2f}% of the test images")


if __name__ == "__main__":
    try:
        main()
    except (OSError, ValueError) as e:  # a missing or unreadable file of the twin folder, a malformed one
        sys.exit(f"torch_twin: {e}")
    except KeyError as e:
        sys.exit(f"torch_twin: {e} is missing from the folder's files (were they written by 13_recap --twin?)")
