# Step 6's claims: hooks give exactly step 5's parameters (the same all-reduces on the same
# gradients: bit-identical), with one all-reduce per parameter per step (6 x 20 = 120); and
# in the trace, in every step of every rank, the first all-reduce starts before backward
# has computed its last gradient.
expect_count 2 'naive ([0-9a-f]{16}), hooks \1;' "hooks = naive DDP, bit for bit"
expect_count 2 '120 all-reduces in 20 steps' "one all-reduce per parameter per step"
python3 "$root/lessons/common/trace_overlap.py" "$LESSON_OUT/hooks_trace.json" "backward + wait" 20 6 ||
  fail "the trace does not show the overlap"
