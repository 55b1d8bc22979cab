# Step 3's claims, on 3 processes: each rank's ZeRO shard holds about 1/3 of Adam's state
# (to within 1%: the flattened parameters are padded to a multiple of 3, and the step
# counters are not split); training equals
# DDP with an unsharded Adam; the replicas are identical.
full=$(field 'Adam state ([0-9]+) bytes unsharded')
for shard in $(fields 'unsharded, ([0-9]+) bytes in my ZeRO shard'); do
  holds "(3 * shard - full) ^ 2 < (0.01 * full) ^ 2" "a rank holds a third of the state" shard="$shard" full="$full"
done
expect_count 3 'bytes in my ZeRO shard' "every rank reported"
for d in $(fields 'max \|ZeRO parameters - DDP\+Adam parameters\| = ([0-9.e+-]+)'); do
  holds "d < 1e-6" "ZeRO trains like DDP + Adam" d="$d"
done
[[ $(fields 'ZeRO parameters ([0-9a-f]{16})$' | sort -u | wc -l) -eq 1 ]] || fail "the replicas differ"
echo "ok: the replicas are bit-identical"
