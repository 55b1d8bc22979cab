#!/usr/bin/env python3
"""Checks a Chrome trace written by a lesson for communication overlapping backward.

    trace_overlap.py TRACE SPAN STEPS PER_STEP

On every rank there must be STEPS spans named SPAN (a backward pass); inside each, exactly
PER_STEP all-reduces must start, and the first of them before the "gradients computed"
span that starts with it ends (that is, before backward produced its last gradient).
Exits 1, saying where, if not.
"""
import json
import sys

if len(sys.argv) != 5 or not sys.argv[3].isdigit() or not sys.argv[4].isdigit():
    sys.exit("usage: trace_overlap.py TRACE SPAN STEPS PER_STEP (STEPS and PER_STEP whole numbers)")
path, span, steps, per_step = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
try:
    with open(path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e["ph"] == "X"]
except (OSError, ValueError, KeyError, TypeError) as e:
    sys.exit(f"trace_overlap: cannot read the trace {path}: {e!r}")
problems = []
for rank in sorted({e["pid"] for e in events}):
    mine = [e for e in events if e["pid"] == rank]
    backwards = [e for e in mine if e["name"] == span]
    computed = {e["ts"]: e["ts"] + e["dur"] for e in mine if e["name"] == "gradients computed"}
    starts = sorted(e["ts"] for e in mine if e["name"].startswith("all_reduce"))
    if len(backwards) != steps:
        problems.append(f"rank {rank}: {len(backwards)} '{span}' spans, expected {steps}")
        continue
    for b in backwards:
        inside = [t for t in starts if b["ts"] <= t <= b["ts"] + b["dur"]]
        if len(inside) != per_step:
            problems.append(f"rank {rank}: the span at {b['ts']} holds {len(inside)} all-reduce starts, expected {per_step}")
        elif not inside[0] < computed[b["ts"]]:
            problems.append(f"rank {rank}: the first all-reduce started at {inside[0]}, after the last gradient "
                            f"at {computed[b['ts']]}")
    print(f"rank {rank}: {steps} '{span}' spans, {per_step} all-reduces starting inside each, "
          "the first before backward's last gradient")
for p in problems:
    print(p)
sys.exit(1 if problems else 0)
