# Step 15's claims, on 3 processes: accumulating 4 micro-batches' gradients gives the same
# weights as one batch of their rows (within float32 rounding: the sums run in another
# order), with or without no_sync(); inside no_sync() a step sends what one batch sends,
# a quarter of what syncing after every micro-batch sends.
expect "all_reduce runs the ring" "the ring runs, so every byte is counted"
for d in $(results no_sync_vs_big) $(results every_vs_big); do
  holds "d < 1e-5" "accumulated gradients train like one big batch" d="$d"
done
for r in 0 1 2; do
  big=$(results big_bytes | sed -n "$((r + 1))p")
  every=$(results every_bytes | sed -n "$((r + 1))p")
  held=$(results no_sync_bytes | sed -n "$((r + 1))p")
  holds "held == big" "rank $r: no_sync() sends per step exactly what one batch sends" held="$held" big="$big"
  holds "every == 4 * held" "rank $r: syncing every micro-batch sends 4 times that" every="$every" held="$held"
done
[[ $(results fingerprint | sort -u | wc -l) -eq 1 ]] || fail "the replicas differ"
echo "ok: the replicas are bit-identical"
