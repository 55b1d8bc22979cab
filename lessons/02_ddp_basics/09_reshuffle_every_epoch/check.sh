# Step 9's claims: without set_epoch every epoch repeats one order; with it the order
# changes from epoch to epoch; either way, within an epoch the two ranks' slices of the
# 12 examples are disjoint and cover them; rank 0's sampler says once that set_epoch
# was forgotten.
# rank_orders R HOW: rank R's order in each of the 3 epochs, one per line.
rank_orders() { for e in 0 1 2; do results "epoch_${e}_$2" | sed -n "$(($1 + 1))p"; done; }
for r in 0 1; do
  [[ $(rank_orders $r without_set_epoch | wc -l) -eq 3 ]] || fail "rank $r should report 3 epochs"
  [[ $(rank_orders $r without_set_epoch | sort -u | wc -l) -eq 1 ]] || fail "rank $r: without set_epoch the epochs should repeat"
  echo "ok: rank $r without set_epoch: the same order in all 3 epochs"
  [[ $(rank_orders $r with_set_epoch | sort -u | wc -l) -eq 3 ]] || fail "rank $r: with set_epoch each epoch should differ"
  echo "ok: rank $r with set_epoch: 3 different orders"
done
for e in 0 1 2; do
  for how in without_set_epoch with_set_epoch; do
    n=$(results "epoch_${e}_$how" | tr ' ' '\n' | grep -c .)
    u=$(results "epoch_${e}_$how" | tr ' ' '\n' | grep . | sort -u | wc -l)
    [[ $n -eq 12 && $u -eq 12 ]] || fail "epoch $e ($how): the ranks' slices should split the 12 examples ($n slots, $u distinct)"
  done
done
echo "ok: in every epoch the slices split the dataset"
expect_count 1 "\[rank 0\] \[DistributedSampler\] epoch 0's order was drawn again: set_epoch\(\) was not called" \
  "rank 0's sampler says once that the epoch was drawn again"
expect_none "\[rank 1\] \[DistributedSampler\]" "rank 1 leaves the warning to rank 0"
