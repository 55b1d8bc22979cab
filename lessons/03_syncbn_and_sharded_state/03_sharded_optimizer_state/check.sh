# Step 3's claims, on 3 processes: each rank's ZeRO shard holds about 1/3 of Adam's state
# (to within 1%: the flattened parameters are padded to a multiple of 3, and the step
# counters are not split); training equals
# DDP with an unsharded Adam; the replicas are identical.
full=$(result full_state_bytes)
for shard in $(results shard_state_bytes); do
  holds "(3 * shard - full) ^ 2 < (0.01 * full) ^ 2" "a rank holds a third of the state" shard="$shard" full="$full"
done
[[ $(results shard_state_bytes | wc -l) -eq 3 ]] || fail "every rank should report its shard"
# The two sum the gradients in different orders (a reduce-scatter ring, a shared-memory
# all-reduce), so they differ in the last bits, and Adam's division by sqrt(v) magnifies
# that where a gradient is near 0. Adam moves a weight by at most about lr = 1e-3 a step:
# 1e-5 is 1% of one step; a missed step or another learning rate moves weights by whole steps.
for d in $(results difference_from_ddp); do
  holds "d < 1e-5" "ZeRO trains like DDP + Adam" d="$d"
done
[[ $(results fingerprint | wc -l) -eq 3 && $(results fingerprint | sort -u | wc -l) -eq 1 ]] || fail "the replicas differ"
echo "ok: the replicas are bit-identical"
