# Step 3's claims, on 3 processes: through the store every rank learns every rank's pid
# (all ranks print the same list, of 3 distinct pids); and a tensor sent around the ring
# with send/recv comes back to rank 0 as [1, 2, 3] + 10 * (0 + 1 + 2) = [31, 32, 33].
expect_count 3 'the store says the ranks. pids are 0:[0-9]+ 1:[0-9]+ 2:[0-9]+$' "every rank reads all three"
[[ $(fields 'pids are (.*)$' | sort -u | wc -l) -eq 1 ]] || fail "the ranks read different lists"
echo "ok: they all read the same list"
expect '^\[rank 0\] rank 0 got back \[31, 32, 33\] after the message went round 3 ranks' "the message went round"
