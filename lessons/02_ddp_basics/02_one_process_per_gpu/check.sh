# Step 2's claims: every rank is its own process (distinct process ids), all started by
# the one launcher (the same parent), and each drives one device.
[[ $(results pid | wc -l) -eq 3 ]] || fail "three ranks should report their process"
echo "ok: three ranks report"
[[ $(results pid | sort -u | wc -l) -eq 3 ]] || fail "two ranks share a process"
echo "ok: three distinct process ids"
[[ $(results parent | sort -u | wc -l) -eq 1 ]] || fail "the ranks have different parents"
echo "ok: one launcher started them all"
[[ $(result distinct_processes) == 3 ]] || fail "rank 0 should see three distinct processes too"
echo "ok: rank 0 sees three distinct processes too"
