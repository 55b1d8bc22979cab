# Step 6's claims, on 3 processes (S: the parameters' bytes): ZeRO-1 and ZeRO-2 train as DDP
# (every weight within 1e-5: 1% of an Adam step); all three send 2 (n-1)/n S a step (within 0.1%:
# message headers); after backward DDP and ZeRO-1 hold every gradient, ZeRO-2 a third
# (its shard, padded to a multiple of 3); ZeRO-1 and ZeRO-2 a third of Adam's state.
S=$(result params_total)
for k in zero1 zero2; do
  holds "d < 1e-5" "$k trains as DDP" d="$(result ${k}_vs_ddp)"
done
for k in ddp zero1 zero2; do
  holds "(u - 2) ^ 2 < 0.002 ^ 2" "$k sends 2 (n-1)/n S a step" u="$(result ${k}_sent_units)"
done
for k in ddp zero1; do holds "g == s" "$k holds every gradient after backward" g="$(result ${k}_grads)" s="$S"; done
holds "(3 * g - s) ^ 2 < (0.001 * s) ^ 2" "ZeRO-2 holds a third of the gradients" g="$(result zero2_grads)" s="$S"
for k in zero1 zero2; do
  holds "(3 * st - 2 * s) ^ 2 < (0.001 * s) ^ 2" "$k holds a third of Adam's state (2 S)" st="$(result ${k}_state)" s="$S"
done
