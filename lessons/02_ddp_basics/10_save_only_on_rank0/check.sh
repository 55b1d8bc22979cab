# Step 10's claims, on 3 processes: only rank 0 writes the checkpoint (the others write
# next to nothing while it saves: a barrier's few bytes); exactly one file is left, with
# no temporary beside it; every rank loads exactly its live replica's parameters.
size=$(result file_bytes)
mapfile -t wrote < <(results bytes_written)
w0=${wrote[0]:-}
holds "w0 >= size" "rank 0 wrote the file" w0="$w0" size="$size"
for r in 1 2; do
  w=${wrote[$r]:-}
  holds "w < 0.01 * size" "rank $r wrote none of it" w="$w" size="$size"
done
[[ $(ls "$LESSON_OUT" | wc -l) -eq 1 && -f "$LESSON_OUT/ckpt.safetensors" ]] || fail "expected only ckpt.safetensors in the output folder: $(ls "$LESSON_OUT")"
echo "ok: one checkpoint file, no temporary left"
expect_count 3 'loaded the checkpoint: ([0-9a-f]+), live replica \1' "every rank loads its replica's exact parameters"
