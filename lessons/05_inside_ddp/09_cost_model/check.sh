# Step 9's claims, as arithmetic (never as timings, which depend on the machine's load):
# the fitted alpha and beta are positive; every predicted all-reduce time is the formula
# 2(n-1) alpha + 2(n-1)/n 4P beta computed from the reported alpha and beta, every predicted
# speedup n tc / (tc + T); 4 model sizes x 7 world sizes are predicted; measured and
# model times are given side by side for 7 sizes; the plot is a PNG.
[[ $(result algorithm) == ring ]] || fail "the model is the ring's, so the ring must run: $(result algorithm) ran"
echo "ok: the ring ran (forced: on one machine all_reduce would take shared memory)"
alpha=$(result alpha)
beta=$(result beta)
holds "alpha > 0 && beta > 0" "alpha and beta are positive" alpha="$alpha" beta="$beta"
[[ $(results measured | wc -l) -eq 7 ]] || fail "measured beside the model for 7 sizes: got $(results measured | wc -l)"
echo "ok: measured beside the model for 7 sizes"
[[ $(results prediction | wc -l) -eq 28 ]] || fail "28 predictions expected, got $(results prediction | wc -l)"
echo "ok: 28 predictions"
results prediction | awk -v a="$alpha" -v b="$beta" '{
    P = $1; n = $2; tc = $3; tm = $4; s = $5
    want = 2 * (n - 1) * a + 2 * (n - 1) / n * 4 * P * b
    if ((tm - want) ^ 2 > (1e-9 * want) ^ 2) { print "all-reduce " tm " != formula " want " for P " P " n " n; bad = 1 }
    sp = n * tc / (tc + tm)
    if ((s - sp) ^ 2 > (1e-9 * sp) ^ 2) { print "speedup " s " != " sp; bad = 1 }
  } END { exit bad }' || fail "a prediction does not follow the model"
echo "ok: all 28 predictions follow the formulas"
[[ $(results ddp_speedup | wc -w) -eq 3 ]] || fail "no measured DDP speedup beside the model's range"
echo "ok: measured beside predicted for DDP ($(result ddp_speedup))"
c=$(result c)
results verdict | awk -v a="$alpha" -v b="$beta" -v c="$c" '{
    P = $1; T = 2 * 7 * a + 2 * 7 / 8 * 4 * P * b; want = 4 * T / (c * P)
    if ($2 < want - 1e-6 * want || $2 > want + 1) { print "P " P ": " $2 " samples, the model says " want; bad = 1 }
    n++
  } END { exit bad || n != 4 }' || fail "the verdicts do not follow the model"
echo "ok: a verdict per model size, following the model"
fit="$LESSON_OUT/allreduce_fit.png"
[[ $(head -c 8 "$fit" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] || fail "$fit is not a PNG"
[[ "$(result fit_plot_check)" == ok ]] || fail "the fit's plot: $(result fit_plot_check)"
echo "ok: the measured times are drawn beside the fitted line (read back: every point where it belongs)"
holds "w >= 0" "the fit's worst relative error is reported" w="$(result worst_fit)"
if awk -v w="$(result worst_fit)" 'BEGIN { exit !(w > 0.25) }'; then
  expect 'warning: a measured time of 1 MiB or more is [0-9]+% away from the fitted line' "a poor fit is warned about"
fi
png="$LESSON_OUT/ddp_scaling.png"
[[ $(head -c 8 "$png" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] || fail "$png is not a PNG"
[[ "$(result scaling_plot_check)" == ok ]] || fail "the scaling plot: $(result scaling_plot_check)"
echo "ok: the scaling plot shows every prediction and the speedup measured here (read back)"
