# Step 2's claims: two launchers with --nnodes=2 form one job of 4 ranks: node 0 has
# global ranks 0-1 and node 1 has 2-3 (local ranks 0-1 on each), and an all-reduce spans
# both nodes (0 + 1 + 2 + 3 = 6 everywhere).
for n in 0 1; do
  for j in 0 1; do
    r=$((n * 2 + j))
    expect "^\[node $n\] \[rank $r\] node $n, local rank $j -> global rank $r of 4; all_reduce of ranks = 6$" "node $n, local rank $j is rank $r"
  done
done
