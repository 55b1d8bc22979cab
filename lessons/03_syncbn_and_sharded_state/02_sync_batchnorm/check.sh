# Step 2's claims, on 2 and then 4 processes (the test runs 4): with SyncBatchNorm every
# rank's output, gradients and running statistics equal one process's plain BatchNorm over
# the whole batch, to float rounding.
expect_count 4 'layer 1 is now SyncBatchNorm' "convert_sync_batchnorm swapped the layer"
for what in output gradient running_var; do
  mapfile -t ds < <(results "${what}_difference")
  [[ ${#ds[@]} -eq 4 ]] || fail "every rank should compare its $what (got ${#ds[@]})"
  for d in "${ds[@]}"; do holds "d < 1e-5" "$what equals the global batch's" d="$d"; done
done
