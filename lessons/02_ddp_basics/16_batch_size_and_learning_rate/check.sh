# Step 16's claims (the quick runs: 12,000 images, 4 epochs): two processes of 64 take
# half the optimizer steps of one process of 64 and train as one process of 128 (the same
# rows in every step, summed in another order: the losses agree to 0.1% after an epoch,
# drift apart slowly after); the linear scaling rule applied without warm-up to a rate
# already near its limit (0.2 for two processes) ends the first epoch higher than 0.1.
run() { LESSON_RESULTS="$LESSON_RESULTS.$1" result "$2"; }
holds "b * 2 == a" "two processes take half the steps of one (same batch per process)" a="$(run A steps)" b="$(run B steps)"
holds "b == c" "... as many as one process with their global batch" b="$(run B steps)" c="$(run C steps)"
holds "(b - c) ^ 2 < (1e-3 * c) ^ 2" "2 x 64 trains as 1 x 128: epoch-1 loss within 0.1%" \
  b="$(run B loss_epoch_1)" c="$(run C loss_epoch_1)"
holds "(b - c) ^ 2 < (1e-2 * c) ^ 2" "... the last epoch's loss within 1% (rounding drift)" \
  b="$(run B loss_epoch_4)" c="$(run C loss_epoch_4)"
holds "(b - c) ^ 2 <= 0.5 ^ 2" "... the test accuracy within 0.5 points" b="$(run B accuracy_epoch_4)" c="$(run C accuracy_epoch_4)"
holds "e > b" "rate 0.2 without warm-up ends epoch 1 above rate 0.1" e="$(run E loss_epoch_1)" b="$(run B loss_epoch_1)"
expect_count 6 "^[A-F]: .* final test accuracy [0-9.]+%" "all six runs trained and were reported"
expect "^   lr at step:  0: 0.0021 " "F's warm-up starts at 1/W of its peak rate (W = 94 steps: 0.2/94)"
