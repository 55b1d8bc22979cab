# Step 3's claims, on 3 processes: each rank's ZeRO shard holds about 1/3 of Adam's state
# (to within 1%: the flattened parameters are padded to a multiple of 3, and the step
# counters are not split), in both pairings; training equals DDP with an unsharded Adam;
# the replicas are identical; bytes sent per step, in units of (n-1)/n S (S the
# parameters' bytes): DDP 2, PyTorch's pairing 3 (DDP's all-reduce, then the shards), the
# reduce-scatter design 2 (the all-reduce's two halves, with the update in between).
expect "all_reduce runs the ring here" "the ring runs, so every byte is counted"
full=$(result full_state_bytes)
for shard in $(results shard_state_bytes) $(results paired_shard_state_bytes); do
  holds "(3 * shard - full) ^ 2 < (0.01 * full) ^ 2" "a rank holds a third of the state" shard="$shard" full="$full"
done
[[ $(results shard_state_bytes | wc -l) -eq 3 ]] || fail "every rank should report its shard"
# The reduce-scatter sums the gradients in another order than DDP's all-reduce, so they
# differ in the last bits, and Adam's division by sqrt(v) magnifies that where a gradient is
# near 0. Adam moves a weight by at most about lr = 1e-3 a step: 1e-5 is 1% of one step; a
# missed step or another learning rate moves weights by whole steps.
for d in $(results difference_from_ddp) $(results paired_difference_from_ddp); do
  holds "d < 1e-5" "ZeRO trains like DDP + Adam" d="$d"
done
for key in fingerprint paired_fingerprint; do
  [[ $(results $key | wc -l) -eq 3 && $(results $key | sort -u | wc -l) -eq 1 ]] || fail "the replicas differ ($key)"
done
echo "ok: the replicas are bit-identical, in both pairings"
unit=$(result ring_unit_bytes)
# Within 0.1% of the closed form: each message also carries a 48-byte header.
holds "(ddp / u - 2) ^ 2 < 1e-6" "DDP sends 2 (n-1)/n S per step" ddp="$(result ddp_bytes_per_step)" u="$unit"
holds "(p / u - 3) ^ 2 < 1e-6" "PyTorch's pairing sends 3 (n-1)/n S per step" p="$(result paired_bytes_per_step)" u="$unit"
holds "(z / u - 2) ^ 2 < 1e-6" "the reduce-scatter design sends 2 (n-1)/n S, as DDP" z="$(result zero_bytes_per_step)" u="$unit"
