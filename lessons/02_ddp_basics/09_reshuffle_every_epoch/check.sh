# Step 9's claims: without set_epoch every epoch repeats one order; with it the order
# changes from epoch to epoch; either way, within an epoch the two ranks' slices of the
# 12 examples are disjoint and cover them.
for r in 0 1; do
  [[ $(fields "^\[rank $r\] rank $r epoch [0-2] without set_epoch: (.*)$" | sort -u | wc -l) -eq 1 ]] || fail "rank $r: without set_epoch the epochs should repeat"
  echo "ok: rank $r without set_epoch: the same order in all 3 epochs"
  [[ $(fields "^\[rank $r\] rank $r epoch [0-2] with set_epoch: +(.*)$" | sort -u | wc -l) -eq 3 ]] || fail "rank $r: with set_epoch each epoch should differ"
  echo "ok: rank $r with set_epoch: 3 different orders"
done
for e in 0 1 2; do
  for how in "without set_epoch:" "with set_epoch: +"; do
    n=$(fields "epoch $e $how(.*)$" | tr ' ' '\n' | grep -c . )
    u=$(fields "epoch $e $how(.*)$" | tr ' ' '\n' | grep . | sort -u | wc -l)
    [[ $n -eq 12 && $u -eq 12 ]] || fail "epoch $e ($how): the ranks' slices should split the 12 examples ($n slots, $u distinct)"
  done
done
echo "ok: in every epoch the slices split the dataset"
