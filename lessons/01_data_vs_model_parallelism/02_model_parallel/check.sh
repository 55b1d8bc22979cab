# Step 2's claims, as printed: each rank holds its part of the model, only rank 1 (which
# holds the loss) sees losses, and the split model learns. pipeline_test checks that the
# split model computes exactly what the whole model computes in one process.
expect '^\[rank 0\] rank 0 holds layer 1 \(784->256\)' "rank 0 holds layer 1"
expect '^\[rank 1\] rank 1 holds layers 2-3' "rank 1 holds layers 2-3 and the loss"
expect_none '^\[rank 0\] step' "rank 0 never sees the loss"
first=$(field '^\[rank 1\] step   0  loss ([0-9.]+)')
last=$(field '^\[rank 1\] step 199  loss ([0-9.]+)')
holds "last < 0.8 * first" "it learns" first="$first" last="$last"
expect "^\[rank 0\] rank 0 trained 200960 of the model.s 269322 parameters" "rank 0 holds 75% of the weights"
expect "^\[rank 1\] rank 1 trained 68362 of the model.s 269322 parameters" "rank 1 holds the other 25%"
