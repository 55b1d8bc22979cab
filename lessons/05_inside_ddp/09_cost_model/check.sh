# Step 9's claims, as arithmetic (never as timings, which depend on the machine's load):
# the fitted alpha and beta are positive; every predicted all-reduce time is the formula
# 2(n-1) alpha + 2(n-1)/n 4P beta computed from the printed alpha and beta, every predicted
# speedup n tc / (tc + T); 4 model sizes x 7 world sizes are predicted; measured and
# model times are printed side by side for 7 sizes; the plot is a PNG.
alpha=$(field 'alpha = ([0-9.e+-]+) s per step')
beta=$(field 'beta = ([0-9.e+-]+) s per byte')
holds "alpha > 0 && beta > 0" "alpha and beta are positive" alpha="$alpha" beta="$beta"
expect_count 7 'all-reduce of +[0-9]+ KiB: measured +[0-9.]+ ms, model +[0-9.]+ ms' "measured beside the model for 7 sizes"
expect_count 28 '  P [0-9.e+]+  n [2-8]: compute' "28 predictions"
grep -E '  P [0-9.e+]+  n [2-8]: compute' "$OUTPUT" | sed -E 's/.*P ([0-9.e+]+)  n ([0-9]): compute +([0-9.]+) ms, all-reduce +([0-9.]+) ms, speedup +([0-9.]+)/\1 \2 \3 \4 \5/' |
  awk -v a="$alpha" -v b="$beta" '{
    P = $1; n = $2; tc = $3; tm = $4; s = $5
    want = (2 * (n - 1) * a + 2 * (n - 1) / n * 4 * P * b) * 1e3
    if ((tm - want) ^ 2 > (0.01 * want + 0.001) ^ 2) { print "all-reduce " tm " != formula " want " for P " P " n " n; bad = 1 }
    sp = n * tc / (tc + tm)
    if ((s - sp) ^ 2 > (0.01 * sp) ^ 2) { print "speedup " s " != " sp; bad = 1 }
  } END { exit bad }' || fail "a prediction does not follow the model"
echo "ok: all 28 predictions follow the formulas"
expect 'DDP on 2 ranks, this model: measured speedup [0-9.]+; model [0-9.]+ \(no overlap\) to [0-9.]+ \(full overlap\)' "measured beside predicted for DDP"
c=$(field 'compute: c = ([0-9.e+-]+) s per parameter')
grep -E 'on 8 ranks, 80% efficiency needs at least' "$OUTPUT" | sed -E 's/.*P ([0-9.e+]+): on 8 ranks.* at least ([0-9]+) samples.*/\1 \2/' |
  awk -v a="$alpha" -v b="$beta" -v c="$c" '{
    P = $1; T = 2 * 7 * a + 2 * 7 / 8 * 4 * P * b; want = 4 * T / (c * P)
    if ($2 < want - 1e-6 * want || $2 > want + 1) { print "P " P ": " $2 " samples, the model says " want; bad = 1 }
    n++
  } END { exit bad || n != 4 }' || fail "the verdicts do not follow the model"
echo "ok: a verdict per model size, following the model"
png="$LESSON_OUT/ddp_scaling.png"
[[ $(head -c 8 "$png" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] || fail "$png is not a PNG"
echo "ok: the plot is a PNG"
