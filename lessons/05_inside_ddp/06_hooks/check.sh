# Step 6's claims: hooks give exactly step 5's parameters (the same all-reduces on the same
# gradients: bit-identical), with one all-reduce per parameter per step (6 x 20 = 120); and
# in the trace, in every step of every rank, the first all-reduce starts before backward
# has computed its last gradient.
expect_count 2 'naive ([0-9a-f]{16}), hooks \1;' "hooks = naive DDP, bit for bit"
expect_count 2 '120 all-reduces in 20 steps' "one all-reduce per parameter per step"
python3 - "$LESSON_OUT/hooks_trace.json" <<'PY' || fail "the trace does not show the overlap"
import json, sys
events = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e["ph"] == "X"]
for rank in sorted({e["pid"] for e in events}):
    mine = [e for e in events if e["pid"] == rank]
    steps = [e for e in mine if e["name"] == "backward + wait"]
    done = {e["ts"]: e["ts"] + e["dur"] for e in mine if e["name"] == "gradients computed"}
    starts = sorted(e["ts"] for e in mine if e["name"].startswith("all_reduce"))
    assert len(steps) == 20, f"rank {rank}: {len(steps)} steps"
    for s in steps:
        inside = [t for t in starts if s["ts"] <= t <= s["ts"] + s["dur"]]
        assert len(inside) == 6, f"rank {rank}: {len(inside)} all-reduces in a step, expected 6"
        assert inside[0] < done[s["ts"]], f"rank {rank}: the first all-reduce started after the last gradient"
    print(f"rank {rank}: in all 20 steps, 6 all-reduces, the first before backward's last gradient")
PY
