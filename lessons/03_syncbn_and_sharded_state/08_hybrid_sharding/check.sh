# Step 8's claims, on 4 processes as 2 machines of 2: HYBRID_SHARD trains as DDP (within
# 1e-5); a rank holds half the parameters' shards (its machine's half), where FULL_SHARD
# over 4 holds a quarter; between machines a rank sends only the all-reduce of its shard's
# gradients: 2 (m-1)/m x S/2 with m = 2 machines, that is S/2 (within 0.1%: headers).
S=$(result params_total)
holds "d < 1e-5" "HYBRID_SHARD trains as DDP" d="$(result hybrid_vs_ddp)"
for a in $(results hybrid_across); do
  holds "(a - s / 2) ^ 2 < (0.001 * s) ^ 2" "between machines, a rank sends half of S a step" a="$a" s="$S"
done
holds "h > f" "a HYBRID_SHARD rank holds more parameters than a FULL_SHARD one" h="$(result hybrid_params)" f="$(result full_params)"
