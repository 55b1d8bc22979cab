# Step 1's claims: the baseline is one process (one rank prints), and it is deterministic:
# the same seed, the same data and the same arithmetic give the same bits on a second run,
# which is what lets the later steps compare with it.
expect_count 1 'after 20 steps: loss' "one process"
second=$("$root/$program")
[[ "$(grep 'after 20 steps' <<<"$second")" == "$(grep -o 'after 20 steps.*' "$OUTPUT")" ]] || fail "a second run ended differently"
echo "ok: a second run ends bit-identical"
