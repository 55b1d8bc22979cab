# Step 1's claims: with plain BatchNorm each rank's statistics differ from the global
# batch's and from each other, and so does the output.
m0=$(field '^\[rank 0\] rank 0: feature 0 mean of my 4 rows ([-+0-9.]+)')
m1=$(field '^\[rank 1\] rank 1: feature 0 mean of my 4 rows ([-+0-9.]+)')
g=$(field 'of the global batch ([-+0-9.]+)')
holds "(m0 - m1) ^ 2 > 1" "the two ranks see different means" m0="$m0" m1="$m1"
holds "2 * g - m0 - m1 < 1e-3 && m0 + m1 - 2 * g < 1e-3" "the global mean is the mean of the two halves' (equal sizes)" g="$g" m0="$m0" m1="$m1"
for r in 0 1; do
  d=$(field "^\[rank $r\] rank $r: max \|my BatchNorm output - global BatchNorm output\| = ([0-9.]+)")
  holds "d > 0.1" "rank $r's output is not the global batch norm" d="$d"
done
