# Step 4's claims, on 3 processes: the whole state gathers on rank 0 only; rank 0 writes
# the two files; every rank resumes from them and ends bit-identical to the uninterrupted run.
n0=$(field '^\[rank 0\] rank 0: consolidated state has ([0-9]+) tensors')
holds "n0 > 0" "rank 0 holds the consolidated state" n0="$n0"
expect_count 2 'consolidated state has 0 tensors here' "the other ranks hold none of it"
[[ -s "$LESSON_OUT/model.safetensors" && -s "$LESSON_OUT/optimizer.safetensors" ]] || fail "the checkpoint files are missing"
[[ $(ls "$LESSON_OUT" | wc -l) -eq 2 ]] || fail "expected exactly the two checkpoint files: $(ls "$LESSON_OUT")"
echo "ok: model.safetensors and optimizer.safetensors, nothing else"
expect_count 3 'uninterrupted ([0-9a-f]{16}), resumed \1$' "every rank's resumed run is bit-identical to the uninterrupted one"
[[ $(fields 'uninterrupted ([0-9a-f]{16}),' | sort -u | wc -l) -eq 1 ]] || fail "the replicas differ"
echo "ok: and all replicas agree"
