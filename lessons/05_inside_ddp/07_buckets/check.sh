# Step 7's claims: for every bucket size the all-reduces counted in the run equal the
# prediction (buckets x 20 steps): each parameter its own bucket at 1e-6 MiB (6), 3 at
# 0.001 MiB, 2 at 0.25 MiB, 1 at 25 MiB; the sweep's picture, read back, shows its 4 points.
# Step times are printed and plotted, never asserted (this machine is shared and noisy).
for row in "1e-06 6" "0.001 3" "0.25 2" "25 1"; do
  read -r cap n <<<"$row"
  expect "^\[rank 0\] cap $cap MiB: $n buckets .*; $((n * 20)) all-reduces in 20 steps, predicted $((n * 20));" "cap $cap MiB: $n buckets, $((n * 20)) messages as predicted"
done
png="$LESSON_OUT/bucket_sweep.png"
[[ $(head -c 8 "$png" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] || fail "$png is not a PNG"
w=$(od -An -tu1 -j16 -N4 "$png" | awk '{print $1*16777216 + $2*65536 + $3*256 + $4}')
[[ $w -eq 800 ]] || fail "$png is $w pixels wide, expected 800"
echo "ok: the plot is an 800-pixel-wide PNG"
[[ "$(result plot_check)" == ok ]] || fail "the sweep's plot: $(result plot_check)"
holds "n == 4" "the plot, read back, shows each of the 4 bucket sizes' step time where it belongs" n="$(result plot_points)"
