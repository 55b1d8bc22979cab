# Step 8's claims, on 2 processes: DDP lays out the same buckets as step 7 and ends with
# bit-identical parameters (with 2 ranks a + b = b + a, so any reduction order gives the
# same bits), which are the baseline's to 1e-5.
[[ "$(results buckets_step7 | xargs -d '\n')" == "4 2 4 2" && "$(results buckets_ddp | xargs -d '\n')" == "4 2 4 2" ]] ||
  fail "both ranks should have buckets of 4 and 2 parameters in both: $(results buckets_step7 | xargs -d '\n') / $(results buckets_ddp | xargs -d '\n')"
echo "ok: the same bucket layout (4 and 2 parameters)"
[[ "$(results fingerprint_step7)" == "$(results fingerprint_ddp)" && $(results fingerprint_ddp | wc -l) -eq 2 ]] ||
  fail "DDP should equal step 7 bit for bit"
echo "ok: DDP = step 7, bit for bit"
for r in $(results relative_difference); do holds "r < 1e-5" "and = the baseline" r="$r"; done
