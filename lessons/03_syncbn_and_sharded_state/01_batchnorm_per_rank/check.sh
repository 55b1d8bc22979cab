# Step 1's claims: with plain BatchNorm each rank's statistics differ from the global
# batch's and from each other, and so does the output.
mapfile -t means < <(results my_mean)
m0=${means[0]:-} m1=${means[1]:-}
g=$(result global_mean)
holds "(m0 - m1) ^ 2 > 1" "the two ranks see different means" m0="$m0" m1="$m1"
holds "2 * g - m0 - m1 < 1e-3 && m0 + m1 - 2 * g < 1e-3" "the global mean is the mean of the two halves' (equal sizes)" g="$g" m0="$m0" m1="$m1"
mapfile -t diffs < <(results output_difference)
for r in 0 1; do
  d=${diffs[$r]:-}
  holds "d > 0.1" "rank $r's output is not the global batch norm" d="$d"
done
