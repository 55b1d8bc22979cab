# Step 2's claims: two launchers with --nnodes=2 form one job of 4 ranks: node 0 has
# global ranks 0-1 and node 1 has 2-3 (local ranks 0-1 on each), and an all-reduce spans
# both nodes (0 + 1 + 2 + 3 = 6 everywhere). On emulated machines each node has its own
# hostname and the all-reduce is hierarchical (shared memory within a node, TCP between
# them); as two launchers on one machine, all four share memory.
[[ "$(results global_rank | xargs)" == "0 1 2 3" ]] || fail "expected global ranks 0-3, got $(results global_rank | xargs)"
[[ "$(results node | xargs)" == "0 0 1 1" ]] || fail "ranks 0-1 should be on node 0 and 2-3 on node 1: $(results node | xargs)"
[[ "$(results local_rank | xargs)" == "0 1 0 1" ]] || fail "local ranks should be 0 1 on each node: $(results local_rank | xargs)"
echo "ok: node k's local rank j is global rank 2k + j"
expect "\[alone\] node 0, local rank 0 -> global rank 0 of 1" "without a launcher (no GROUP_RANK) the node comes from the layout"
[[ "$(results sum | xargs)" == "6 6 6 6" ]] || fail "the all-reduce should give 6 on every rank: $(results sum | xargs)"
echo "ok: the all-reduce spans both nodes (6 everywhere)"
mapfile -t hosts < <(results host)
if grep -q "two emulated machines" "$OUTPUT"; then
  [[ "${hosts[0]}" == "${hosts[1]}" && "${hosts[2]}" == "${hosts[3]}" && "${hosts[0]}" != "${hosts[2]}" ]] ||
    fail "each node should have its own hostname: ${hosts[*]}"
  [[ "$(results algorithm | sort -u)" == hierarchical ]] || fail "the all-reduce should be hierarchical: $(results algorithm | xargs)"
  echo "ok: two machines (${hosts[0]}, ${hosts[2]}), the all-reduce hierarchical"
  # Part 2: a 2 s blip after round 2 holds up one round and the job goes on; a cut for good
  # ends both nodes within the 5 s collective timeout, each naming the rank across. The round caught
  # waits out the rest of the outage at least: 2 s less the 0.3 s pause before it (round 3;
  # a later one if taking the link down took longer than that pause).
  for k in 0 1; do
    expect "\[blip: node $k\] \[rank $((2 * k))\] round 8: all_reduce of ranks = 6" "node $k should finish every round through the blip"
    held=$(grep -oE "^\[blip: node $k\] \[rank $((2 * k))\] round [3-8]: all_reduce of ranks = 6 in [0-9.]+" "$OUTPUT" |
      awk '{print $NF}' | sort -g | tail -1)
    awk -v s="${held:-0}" 'BEGIN { exit !(s >= 1.5) }' ||
      fail "one round on node $k should be held up by the 2 s blip (about 1.7 s or more), the longest took ${held:-?} s"
    expect "\[cut: node $k\] \[rank $((2 * k))\] 02_multi_node: \[dist\] timed out after 5 s in all_reduce.*waiting for rank $((2 - 2 * k)) on another machine \(10\.77\.[0-9]+\.$((2 - k))\): .*or the network between the machines is down" \
      "node $k should name the rank across the cut, its address and the network"
    expect "\[cut: node $k\] launch: rank .* exited with status 1" "node $k's launcher should end the job"
  done
  expect_none "\\[cut: node [01]\\] \\[rank [02]\\] round 3:" "no round should pass the cut"
  echo "ok: a 2 s blip held up one round and the job went on; a cut ended it in 5 s, naming the machine across"
  # The same cut under a 60 s collective timeout and a 3 s link timeout: each node takes the
  # other for lost when its TCP has answered nothing for 3 s, long before the 60 s.
  for k in 0 1; do
    expect "\[lost: node $k\] \[rank $((2 * k))\] 02_multi_node: \[dist\] all_reduce.* on rank $((2 * k)): rank $((2 - 2 * k)) on another machine \(10\.77\.[0-9]+\.$((2 - k))\) has not answered at the network level for 3 s \(ENGINE_LINK_TIMEOUT\)" \
      "node $k should take the rank across the cut for lost at the link timeout, naming its address"
  done
  stopped=$(grep -oE "^lost: both nodes had stopped [0-9.]+ s" "$OUTPUT" | awk '{print $(NF-1)}')
  awk -v s="${stopped:-999}" 'BEGIN { exit !(s < 20) }' ||
    fail "with a 3 s link timeout both nodes should stop well before the 60 s collective timeout, took ${stopped:-?} s"
  echo "ok: under a 60 s collective timeout, the 3 s link timeout ended the cut job in $stopped s"
else
  [[ "$(results algorithm | sort -u)" == shm ]] || fail "on one machine the all-reduce should use shared memory"
  echo "ok: one machine, so the all-reduce used shared memory (no machines could be emulated here)"
fi
