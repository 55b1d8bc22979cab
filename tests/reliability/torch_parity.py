"""PyTorch's side of torch_parity_test: recomputes every case the test wrote and compares.

Usage: torch_parity.py CASES.safetensors

The file holds, per case NAME: NAME/in0, NAME/in1, ... (the inputs, float32), NAME/w (the
weights of the loss sum(out * w)), NAME/out and NAME/g0, ... (our output and our gradients);
its metadata maps NAME to a Python expression over a0, a1, ... (for 16-bit cases, over A, B, W
cast to the dtype the name starts with). Float32 cases are recomputed in float64 and must
agree within TOLERANCE of (1 + the largest |value|); 16-bit cases must agree bit for bit.
Prints one line per disagreement, then "cases N mismatches M".
"""
import json
import struct
import sys

import numpy as np
import torch

# float32 rounding, summed in another order than float64's: 1.9e-7 at most on these cases
# (2026-12-04), so 2e-6 leaves a tenfold margin and still catches any wrong formula.
TOLERANCE = 2e-6


def load(path):
    with open(path, 'rb') as f:
        n = struct.unpack('<Q', f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop('__metadata__')
    tensors = {}
    for key, v in header.items():
        begin, end = v['data_offsets']
        assert v['dtype'] == 'F32', key
        tensors[key] = torch.from_numpy(np.frombuffer(data[begin:end], dtype=np.float32).reshape(v['shape']).copy())
    return meta, tensors


def float32_case(name, expr, t, report):
    inputs = []
    while f'{name}/in{len(inputs)}' in t:
        inputs.append(t[f'{name}/in{len(inputs)}'].double().requires_grad_(True))
    y = eval(expr, {'torch': torch, **{f'a{i}': x for i, x in enumerate(inputs)}})

    def compare(what, ref, ours):
        ref = ref.detach()
        if ours is None or tuple(ref.shape) != tuple(ours.shape):
            report(f'{name} {what}: ours {None if ours is None else tuple(ours.shape)}, torch {tuple(ref.shape)}')
            return
        if ref.numel() == 0:
            return
        err = (ref - ours.double()).abs().max().item()
        scale = 1 + ref.abs().max().item()
        if not err <= TOLERANCE * scale:
            report(f'{name} {what}: differs by {err:.3g} (values up to {scale - 1:.3g})')

    compare('output', y, t[f'{name}/out'])
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
    print(f'cases {len(meta)} mismatches {len(bad)}')


if __name__ == '__main__':
    main()
