"""PyTorch's side of torch_parity_test: recomputes every case the test wrote and compares.

Usage: torch_parity.py CASES.safetensors

The file holds, per case NAME: NAME/in0, NAME/in1, ... (the inputs, float32), NAME/w (the
weights of the loss sum(out * w)), NAME/out and NAME/g0, ... (our output and our gradients);
its metadata maps NAME to a Python expression over a0, a1, ... (for 16-bit cases, over A, B, W
cast to the dtype the name starts with). A case without NAME/w ran without gradients. Float32 cases are recomputed in float64 and must
agree within TOLERANCE of (1 + the largest |value|); 16-bit cases must agree bit for bit.
Prints one line per disagreement, then "cases N mismatches M".
"""
import json
import struct
import sys

import numpy as np
import torch

# float32 rounding, summed in another order than float64's: 2.4e-7 at most on these cases
# (2026-12-04), so 2e-6 leaves an eightfold margin and still catches any wrong formula.
TOLERANCE = 2e-6
largest = 0.0  # the largest float32 difference seen, relative to (1 + the largest |value|)


def load(path):
    with open(path, 'rb') as f:
        n = struct.unpack('<Q', f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop('__metadata__')
    meta.pop('engine.crc32c', None)  # the file's checksums (nn/safetensors.h), not a case
    tensors = {}
    for key, v in header.items():
        begin, end = v['data_offsets']
        assert v['dtype'] == 'F32', key
        tensors[key] = torch.from_numpy(np.frombuffer(data[begin:end], dtype=np.float32).reshape(v['shape']).copy())
    return meta, tensors


def batch_norm_after_a_step(x_train, x, weight, bias):
    """One training step's running statistics (from x_train, momentum 0.1), then x normalised
    with them, as a BatchNorm layer in eval() after one forward in train(). The running
    statistics carry no gradient, so x_train gets none."""
    mean, var = torch.zeros(x.shape[1]).double(), torch.ones(x.shape[1]).double()
    torch.nn.functional.batch_norm(x_train, mean, var, training=True)
    return torch.nn.functional.batch_norm(x, mean, var, weight, bias, training=False)


def float32_case(name, expr, t, report):
    inputs = []
    while f'{name}/in{len(inputs)}' in t:
        inputs.append(t[f'{name}/in{len(inputs)}'].double().requires_grad_(True))
    env = {'torch': torch, 'batch_norm_after_a_step': batch_norm_after_a_step}
    y = eval(expr, {**env, **{f'a{i}': x for i, x in enumerate(inputs)}})

    def compare(what, ref, ours):
        if ref is None or ours is None:  # no gradient reaches this input: it must be so on both sides
            if ref is not None or ours is not None:
                report(f'{name} {what}: only {"PyTorch" if ours is None else "ours"} has one')
            return
        ref = ref.detach()
        if tuple(ref.shape) != tuple(ours.shape):
            report(f'{name} {what}: ours {None if ours is None else tuple(ours.shape)}, torch {tuple(ref.shape)}')
            return
        if ref.numel() == 0:
            return
        err = (ref - ours.double()).abs().max().item()
        scale = 1 + ref.abs().max().item()
        global largest
        largest = max(largest, err / scale)
        if not err <= TOLERANCE * scale:
            report(f'{name} {what}: differs by {err:.3g} (values up to {scale - 1:.3g})')

    compare('output', y, t[f'{name}/out'])
    if f'{name}/w' not in t:  # our side ran without gradients
        return
    (y * t[f'{name}/w'].double()).sum().backward()
    for i, x in enumerate(inputs):
        compare(f'gradient of input {i}', x.grad, t.get(f'{name}/g{i}'))


def half_case(name, expr, t, report):
    dtype = getattr(torch, name.split('/')[0])
    env = {'torch': torch, 'A': t['half/a'].to(dtype), 'B': t['half/b'].to(dtype), 'W': t['half/w'].to(dtype)}
    ref, ours = eval(expr, env), t[name]
    if ref.dtype != dtype or tuple(ref.shape) != tuple(ours.shape):
        report(f'{name}: ours {tuple(ours.shape)}, torch {tuple(ref.shape)} {ref.dtype}')
        return
    ref = ref.float()
    same = (ref == ours) | (ref.isnan() & ours.isnan())
    if not bool(same.all()):
        report(f'{name}: {int((~same).sum())} of {ref.numel()} values differ, by up to {(ref - ours).abs().max().item():.3g}')


def main():
    meta, t = load(sys.argv[1])
    bad = []
    for name, expr in sorted(meta.items()):
        if name.startswith(('bfloat16/', 'float16/')):
            half_case(name, expr, t, bad.append)
        else:
            float32_case(name, expr, t, bad.append)
    for line in bad:
        print(line)
    print(f'largest float32 difference {largest:.2g} of the values\' size (tolerance {TOLERANCE:g})')
    print(f'cases {len(meta)} mismatches {len(bad)}')


if __name__ == '__main__':
    main()
