# Step 5's claims: each process takes the device its local rank names (cuda:N with GPUs,
# the CPU here, with the reason printed), its model lives there, and no two ranks with a
# GPU share one.
for r in 0 1; do expect "^\[rank $r\] rank $r: local rank $r -> device (cpu|cuda:$r); model on (cpu|cuda:$r)$" "rank $r's device"; done
gpus=$(fields 'device (cuda:[0-9]+);' | wc -l)
[[ $(fields 'device (cuda:[0-9]+);' | sort -u | wc -l) -eq $gpus ]] || fail "two ranks share a GPU"
if [[ $gpus -eq 0 ]]; then expect_count 2 'no GPU \(.+\), so it computes on the CPU' "no GPU here, and the reason is given"; fi
echo "ok: one device per process ($gpus GPUs in use)"
