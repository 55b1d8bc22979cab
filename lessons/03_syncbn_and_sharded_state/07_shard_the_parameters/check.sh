# Step 7's claims, on 3 processes (S: the parameters' bytes): FULL_SHARD trains as DDP
# (every weight within 1e-5: 1% of an Adam step); it sends 3 (n-1)/n S a step, 1.5 times DDP's 2 (within 0.1%: headers and padding); it holds a
# third of the gradients and of Adam's state, and parameters: its third plus what it had
# gathered at most at once: two consecutive units (on the toy MLP, whose first layer
# holds 75% of it, nearly all of S); the picture shows
# every bar as drawn (read back).
S=$(result params_total)
holds "d < 1e-5" "FULL_SHARD trains as DDP" d="$(result zero3_vs_ddp)"
holds "(u - 3) ^ 2 < 0.003 ^ 2" "FULL_SHARD sends 3 (n-1)/n S a step" u="$(result zero3_sent_units)"
holds "(u - 2) ^ 2 < 0.002 ^ 2" "DDP sends 2 (n-1)/n S a step" u="$(result ddp_sent_units)"
holds "(3 * g - s) ^ 2 < (0.001 * s) ^ 2" "a third of the gradients" g="$(result zero3_grads)" s="$S"
holds "(3 * st - 2 * s) ^ 2 < (0.001 * s) ^ 2" "a third of Adam's state" st="$(result zero3_state)" s="$S"
holds "p > s / 3 && p <= s / 3 + two + 64" "parameters: a third, plus at most two consecutive units gathered" \
  p="$(result zero3_params)" s="$S" two="$(result two_units)"
holds "z < d" "less in all than DDP" z="$(result zero3_total)" d="$(result ddp_total)"
holds "(f - d) ^ 2 < (1e-6 * d) ^ 2" "FSDP's clip_grad_norm_ takes the whole gradient's norm (DDP's)" \
  f="$(result clip_fsdp)" d="$(result clip_ddp)"
holds "o < f" "one rank's shards alone have a smaller norm" o="$(result clip_own)" f="$(result clip_fsdp)"
[[ "$(result picture_check)" == ok ]] || fail "the picture: $(result picture_check)"
echo "ok: memory_per_rank.png shows every bar as drawn (read back)"
