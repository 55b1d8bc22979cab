# Step 1's claims: DDP over N ranks trains exactly what one process trains on the combined
# batch (to float rounding), and every replica ends bit-identical.
[[ $(fields 'parameters ([0-9a-f]{16})$' | wc -l) -eq 2 ]] || fail "both ranks print their fingerprint"
[[ $(fields 'parameters ([0-9a-f]{16})$' | sort -u | wc -l) -eq 1 ]] || fail "the replicas differ"
echo "ok: the replicas are bit-identical"
rel=$(field 'max \|difference\| / max \|weight\| = ([0-9.e+-]+)')
holds "rel < 1e-5" "DDP equals one process on the whole batch" rel="$rel"
