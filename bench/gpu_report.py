"""Sets bench/gpu_bench.cc's and bench/gpu_bench.py's JSON lines side by side as markdown
tables (the GPU section of docs/BENCHMARKS.md), plus the test summary.

    python3 bench/gpu_report.py REPORT_DIR     # reads bench_engine.jsonl, bench_pytorch.jsonl, summary.txt
"""
import json
import os
import sys


def load(path):
    rows = []
    if os.path.exists(path):
        for line in open(path):
            line = line.strip()
            if line.startswith("{"):
                rows.append(json.loads(line))
    return rows


def pick(rows, **kv):
    for r in rows:
        if all(r.get(k) == v for k, v in kv.items()):
            return r
    return None


def main():
    d = sys.argv[1]
    eng, pt = load(os.path.join(d, "bench_engine.jsonl")), load(os.path.join(d, "bench_pytorch.jsonl"))
    out = []
    dev = pick(eng, bench="device") or {}
    ptdev = pick(pt, bench="device") or {}
    out.append(f"GPU: {dev.get('name', '?')} ({dev.get('sms', '?')} SMs); PyTorch {ptdev.get('torch', 'not run')}\n")
    summary = os.path.join(d, "summary.txt")
    if os.path.exists(summary):
        out.append("Tests: " + "; ".join(l.strip() for l in open(summary)) + "\n")
    out.append("| kernel | engine GB/s | engine / copy | PyTorch GB/s | PyTorch / copy |")
    out.append("|---|---|---|---|---|")
    for r in [r for r in eng if r.get("bench") == "bandwidth"]:
        p = pick(pt, bench="bandwidth", kernel=r["kernel"]) or {}
        out.append(f"| {r['kernel']} | {r['GBps']} | {r['of_copy']:.0%} | {p.get('GBps', '-')} | "
                   f"{format(p['of_copy'], '.0%') if p else '-'} |")
    g = pick(eng, bench="gemm")
    if g:
        p = pick(pt, bench="gemm") or {}
        out.append(f"\nGEMM {g['n']}^3 fp32: tiled teaching kernel {g['tiled_tflops']} TFLOP/s, engine via cuBLAS "
                   f"{g['cublas_tflops']} TFLOP/s, PyTorch {p.get('cublas_tflops', '-')} TFLOP/s\n")
    for r in [r for r in eng if r.get("bench") == "gemm16"]:
        p = pick(pt, bench="gemm16", dtype=r["dtype"]) or {}
        out.append(f"GEMM {r['n']}^3 {r['dtype']} (tensor cores, float32 sums): engine via cuBLAS {r['tflops']} "
                   f"TFLOP/s, PyTorch {p.get('tflops', '-')} TFLOP/s\n")
    convs = [r for r in eng if r.get("bench") == "conv_layer"]
    if convs:
        out.append("| conv layer (in x out @ size) | batch | engine fwd ms | PyTorch fwd ms | engine fwd+bwd ms | PyTorch fwd+bwd ms |")
        out.append("|---|---|---|---|---|---|")
        for r in convs:
            p = pick(pt, bench="conv_layer", layer=r["layer"]) or {}
            out.append(f"| {r['layer']} | {r['batch']} | {r['forward_ms']:.3f} | {p.get('forward_ms', '-')} | "
                       f"{r['forward_backward_ms']:.3f} | {p.get('forward_backward_ms', '-')} |")
        out.append("")
    out.append("| model | autocast | batch | engine ms/step | PyTorch ms/step | engine speed / PyTorch | cudaMalloc in timed steps |")
    out.append("|---|---|---|---|---|---|---|")
    for r in [r for r in eng if r.get("bench") == "train_step"]:
        ac = r.get("autocast", "off") + (", CUDA graph" if r.get("graph") else "")
        p = pick(pt, bench="train_step", model=r["model"], batch=r["batch"], autocast=r.get("autocast", "off"))
        ratio = f"{p['step_ms'] / r['step_ms']:.2f}x" if p else "-"
        out.append(f"| {r['model']} | {ac} | {r['batch']} | {r['step_ms']:.3f} | {p['step_ms'] if p else '-'} | "
                   f"{ratio} | {r['mallocs_in_timed_steps']} |")
    parts = [r for r in eng if r.get("bench") == "cnn_part"]
    if parts:
        out.append(f"\nWhere the CNN step's time goes (batch {parts[0]['batch']}, each part alone):\n")
        out.append("| part | engine ms |")
        out.append("|---|---|")
        out += [f"| {r['part']} | {r['ms']:.4f} |" for r in parts]
    for r in [r for r in eng if r.get("bench") == "train_step_graph_error"]:
        out.append(f"\nCUDA graph of the {r['model']} step failed: {r['error']}")
    print("\n".join(out))


if __name__ == "__main__":
    main()
