# Step 7's claims, on 3 processes:
# 1. after backward, DDP's .grad on every rank is the average of the ranks' own gradients;
expect_count 3 'DDP.s \.grad - average of the ranks. gradients\| = ' "every rank compared"
for d in $(results gradient_difference); do
  holds "d <= 1e-7" "DDP's gradient is the average" d="$d"
done
# 2. the ring all-reduce gives the library's sum, and the diagram is the ring's schedule:
#    at reduce-scatter step s rank r sends chunk (r - s) mod 3 and receives (r - s - 1) mod 3;
#    at all-gather step s it sends (r + 1 - s) mod 3 and receives (r - s) mod 3; at the end
#    every rank holds every rank's contribution in every chunk.
expect_count 3 'ring result equals dist::all_reduce: yes' "the ring sums like the library"
awk '
  /^\[rank 0\] (reduce-scatter|all-gather) step/ { phase = $3; step = $5 - 1 }
  /^\[rank 0\]   rank [0-9]+ .*sent chunk/ {
    r = $4; match($0, /sent chunk [0-9]+/); sent = substr($0, RSTART + 11, RLENGTH - 11)
    match($0, /received chunk [0-9]+/); got = substr($0, RSTART + 15, RLENGTH - 15)
    want_s = (phase == "reduce-scatter") ? (r - step + 9) % 3 : (r + 1 - step + 9) % 3
    want_r = (phase == "reduce-scatter") ? (r - step - 1 + 9) % 3 : (r - step + 9) % 3
    if (sent != want_s || got != want_r) { print "wrong chunk: " $0; bad = 1 }
    n++
  }
  END { if (n != 12 || bad) { print "checked " n " rank-steps, expected 12"; exit 1 } }' "$OUTPUT" || fail "the diagram does not follow the ring schedule"
echo "ok: 12 rank-steps follow the ring schedule"
final=$(grep -E '^\[rank 0\]   rank [0-9]+ ' "$OUTPUT" | tail -3)
[[ $(grep -o '{0,1,2}' <<<"$final" | wc -l) -eq 9 ]] || fail "after the all-gather every chunk should hold {0,1,2}: $final"
echo "ok: in the end every rank holds every contribution"
svg="$LESSON_OUT/ring_allreduce.svg"
[[ -s "$svg" ]] || fail "no $svg"
head -c 4 "$svg" | grep -q '<svg' && tail -1 "$svg" | grep -q '</svg>' || fail "$svg is not an SVG document"
[[ $(grep -c '<text' "$svg") -eq $(grep -c '</text>' "$svg") ]] || fail "$svg has unclosed text elements"
[[ $(grep -c '<rect class="cell"' "$svg") -eq 45 ]] || fail "$svg should have 3 x 3 cells for each of 5 stages"
[[ $(grep -c '<text class="cell"[^>]*>{0,1,2}</text>' "$svg") -ge 9 ]] || fail "$svg does not end complete"
# One arrow per send: 3 ranks x 4 steps, each from the chunk sent to the next rank's row.
[[ $(grep -c '<path class="send"' "$svg") -eq 12 ]] || fail "$svg should draw 12 sends (3 ranks x 4 steps) as arrows"
[[ $(grep -c 'class="legend"' "$svg") -eq 4 ]] || fail "$svg should have a legend: 3 colours and the arrow"
echo "ok: $svg draws every send as an arrow, with a legend"
echo "ok: the SVG has a 3x3 grid for each of the 5 stages and ends complete"
# 3. the trace: well-formed Chrome trace JSON; in every backward of every rank both buckets'
#    all-reduces start inside backward, and the first starts before backward has computed
#    its last gradient (communication overlaps computation).
trace="$LESSON_OUT/ddp_trace.json"
[[ -s "$trace" ]] || fail "no $trace"
python3 "$root/lessons/common/trace_overlap.py" "$trace" backward 5 2 || fail "the trace does not show the overlap"
echo "ok: the trace shows communication overlapping backward"
# Every row of the trace has a name, and backward's waiting is measured.
python3 - "$LESSON_OUT/ddp_trace.json" <<'PY' || fail "a row of the trace has no name"
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
named = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
rows = {(e["pid"], e["tid"]) for e in events if e["ph"] == "X"}
missing = rows - named
print(f"{len(rows)} rows, {len(missing)} without a name: {sorted(missing)}")
sys.exit(1 if missing or not rows else 0)
PY
echo "ok: every row of the trace is named"
holds "w >= 0 && w <= b && b > 0" "the wait for all-reduces is measured, a part of backward" \
  w="$(result waiting_us)" b="$(result backward_us)"
expect "^\[rank 0\] rank 0, steps 2-5: backward took [0-9.]+ ms a step, of which [0-9.]+ ms \([0-9]+%\) waiting for all-reduces" \
  "rank 0 prints how much of backward was spent waiting"
