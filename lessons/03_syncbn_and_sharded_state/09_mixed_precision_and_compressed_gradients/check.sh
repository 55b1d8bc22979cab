# Step 9's claims, on 2 processes:
# 1. bfloat16 keeps float32's range with 8 significant bits; float16 keeps 11 bits but
#    overflows past 65504 and underflows below 6e-8.
# 2. Under float16 autocast gradients of ~1e-9 all become 0; a GradScaler brings them back
#    (to float16 precision of float32's); a scale of 1e30 overflows, its steps are skipped
#    and the scale halves until the gradients fit.
# 3. bf16_compress_hook sends half the bytes of float32 gradients and trains within 1% of
#    them over 10 steps; PowerSGD (rank 4) sends under 5% of the bytes; replicas agree.
holds "v == 0.333984375" "bfloat16 rounds 1/3 to 8 significant bits" v="$(result bf16_third)"
holds "v == 0.333251953125" "float16 rounds 1/3 to 11 significant bits" v="$(result fp16_third)"
holds "v == 70144" "bfloat16 holds 70000 (to 8 bits)" v="$(result bf16_70000)"
holds "v == 1" "float16 overflows at 70000 (infinity)" v="$(result fp16_70000_is_inf)"
holds "v == 0" "float16 underflows at 1e-8" v="$(result fp16_1e-8)"
holds "v > 0.99e-8 && v < 1.01e-8" "bfloat16 keeps 1e-8" v="$(result bf16_1e-8)"
holds "z == 1" "under float16 autocast every tiny gradient is 0" z="$(result fp16_zero_fraction)"
holds "d < 2e-3" "a GradScaler restores them to float16 precision" d="$(result scaled_vs_fp32)"
holds "n > 10" "a 1e30 scale is skipped step after step" n="$(result skipped_steps)"
holds "s < 1e30 / 2^10" "... and has halved that many times" s="$(result scale_after)"
for r in 0 1; do
  plain=$(results plain_bytes | sed -n "$((r + 1))p")
  bf16=$(results bf16_bytes | sed -n "$((r + 1))p")
  psgd=$(results powersgd_bytes | sed -n "$((r + 1))p")
  holds "bf16 < 0.51 * plain && bf16 > 0.49 * plain" "rank $r: bf16_compress_hook sends half the bytes" bf16="$bf16" plain="$plain"
  holds "psgd < 0.05 * plain" "rank $r: PowerSGD sends under 5% of them" psgd="$psgd" plain="$plain"
done
holds "d < 0.01" "training with bf16_compress_hook stays within 1% of float32 gradients" d="$(result bf16_apart)"
holds "d < 0.1" "... and with PowerSGD within 10%" d="$(result powersgd_apart)"
[[ $(results fingerprint_bf16 | sort -u | wc -l) -eq 1 ]] || fail "the replicas differ (bf16 hook)"
[[ $(results fingerprint_powersgd | sort -u | wc -l) -eq 1 ]] || fail "the replicas differ (PowerSGD)"
echo "ok: the replicas are bit-identical with either hook"
