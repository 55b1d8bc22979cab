# Step 8's claims, on 3 processes and 10 examples: each rank gets ceil(10/3) = 4; the
# slices cover all 10; the only repeats are the 2 padding slots (3 x 4 = 12).
mapfile -t per_rank < <(results examples)
[[ ${#per_rank[@]} -eq 3 ]] || fail "expected 3 ranks to report their examples, got ${#per_rank[@]}"
for r in 0 1 2; do
  [[ $(wc -w <<<"${per_rank[$r]}") -eq 4 ]] || fail "rank $r should get 4 examples: ${per_rank[$r]}"
  echo "ok: rank $r gets 4 examples"
done
all=$(printf '%s\n' "${per_rank[@]}" | tr ' ' '\n' | sort -n)
[[ $(sort -u <<<"$all" | wc -l) -eq 10 ]] || fail "the slices do not cover all 10 examples: $(echo $all)"
[[ $(wc -l <<<"$all") -eq 12 ]] || fail "expected 12 slots in all"
[[ $(uniq -d <<<"$all" | wc -l) -eq 2 ]] || fail "expected exactly 2 repeated (padding) indices: $(echo $all)"
echo "ok: the slices cover the dataset, overlapping only in the 2 padding slots"
expect '^\[rank 0\] together: 10 distinct examples of 10, 2 handed out twice as padding' "rank 0 counts the same"
