# Step 1's claims: DDP over N ranks trains exactly what one process trains on the combined
# batch (to float rounding), and every replica ends bit-identical.
[[ $(results fingerprint | wc -l) -eq 2 ]] || fail "both ranks report their fingerprint"
[[ $(results fingerprint | sort -u | wc -l) -eq 1 ]] || fail "the replicas differ"
echo "ok: the replicas are bit-identical"
rel=$(result relative_difference)
holds "rel < 1e-5" "DDP equals one process on the whole batch" rel="$rel"
