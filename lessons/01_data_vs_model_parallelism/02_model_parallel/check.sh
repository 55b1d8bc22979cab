# Step 2's claims, as printed: each rank holds its part of the model, only rank 1 (which
# holds the loss) sees losses, and the split model learns. pipeline_test checks that the
# split model computes exactly what the whole model computes in one process.
expect '^\[rank 0\] rank 0 holds layer 1 \(784->256\)' "rank 0 holds layer 1"
expect '^\[rank 1\] rank 1 holds layers 2-3' "rank 1 holds layers 2-3 and the loss"
expect_none '^\[rank 0\] step' "rank 0 never sees the loss"
first=$(result first_loss)
last=$(result last_loss)
holds "last < 0.8 * first" "it learns" first="$first" last="$last"
[[ "$(results parameters_trained | tr '\n' ' ')" == "200960 68362 " ]] || fail "rank 0 should train 200960 and rank 1 68362 of the 269322 parameters"
echo "ok: rank 0 trains 75% of the weights, rank 1 the other 25%"
