# Step 2's claims: every rank is its own process (distinct process ids), all started by
# the one launcher (the same parent), and each drives one device.
expect_count 3 'is process [0-9]+, parent' "three ranks report"
[[ $(fields 'is process ([0-9]+),' | sort -u | wc -l) -eq 3 ]] || fail "two ranks share a process"
echo "ok: three distinct process ids"
[[ $(fields 'parent ([0-9]+),' | sort -u | wc -l) -eq 1 ]] || fail "the ranks have different parents"
echo "ok: one launcher started them all"
expect '^\[rank 0\] 3 ranks ran in 3 distinct processes' "rank 0 sees three distinct processes too"
