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
else
  [[ "$(results algorithm | sort -u)" == shm ]] || fail "on one machine the all-reduce should use shared memory"
  echo "ok: one machine, so the all-reduce used shared memory (no machines could be emulated here)"
fi
