# Step 8's claims, on 2 processes: DDP lays out the same buckets as step 7 and ends with
# bit-identical parameters (with 2 ranks a + b = b + a, so any reduction order gives the
# same bits), which are the baseline's to 1e-5.
expect_count 2 "parameters per bucket: step 7's 4 2, DDP's 4 2" "the same bucket layout"
expect_count 2 'step 7 ([0-9a-f]{16}), DDP \1;' "DDP = step 7, bit for bit"
for r in $(fields 'DDP vs the baseline ([0-9.e+-]+) relative'); do holds "r < 1e-5" "and = the baseline" r="$r"; done
