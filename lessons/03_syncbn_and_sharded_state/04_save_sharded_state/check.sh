# Step 4's claims, on 3 processes: the whole state gathers on rank 0 only; rank 0 writes
# the two files; every rank resumes from them and ends bit-identical to the uninterrupted run.
mapfile -t held < <(results consolidated_tensors)
holds "n0 > 0" "rank 0 holds the consolidated state" n0="${held[0]:-}"
[[ "${held[1]:-}" == 0 && "${held[2]:-}" == 0 ]] || fail "ranks 1 and 2 should hold none of it: ${held[*]}"
echo "ok: the other ranks hold none of it"
[[ -s "$LESSON_OUT/model.safetensors" && -s "$LESSON_OUT/optimizer.safetensors" ]] || fail "the checkpoint files are missing"
[[ $(ls "$LESSON_OUT" | wc -l) -eq 2 ]] || fail "expected exactly the two checkpoint files: $(ls "$LESSON_OUT")"
echo "ok: model.safetensors and optimizer.safetensors, nothing else"
[[ "$(results uninterrupted)" == "$(results resumed)" && $(results resumed | wc -l) -eq 3 ]] ||
  fail "every rank's resumed run should be bit-identical to the uninterrupted one"
echo "ok: every rank's resumed run is bit-identical to the uninterrupted one"
[[ $(results uninterrupted | sort -u | wc -l) -eq 1 ]] || fail "the replicas differ"
echo "ok: and all replicas agree"
