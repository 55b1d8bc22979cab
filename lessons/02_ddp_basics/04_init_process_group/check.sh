# Step 4's claims, on 3 processes: the launcher gave every process its RANK, the shared
# WORLD_SIZE and one rendezvous address; after init the first all_reduce gives 1+2+3 = 6
# on every rank. Run without the launcher, init fails with an error naming the variable.
for r in 0 1 2; do expect "^\[rank $r\] before init: RANK=$r WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=[0-9]+" "rank $r's environment"; done
[[ $(fields 'MASTER_PORT=([0-9]+)' | sort -u | wc -l) -eq 1 ]] || fail "the ranks were given different ports"
echo "ok: one rendezvous address for all"
expect_count 3 'all_reduce of rank \+ 1 over 3 ranks = 6 \(expected 6\)' "the first collective's closed form"
alone=$(env -u RANK -u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT "$root/$program" 2>&1) && fail "init without a launcher should fail"
echo "$alone" | tail -1
grep -q "RANK" <<<"$alone" || fail "the error does not name the missing variable"
echo "ok: without the launcher, a clear error naming RANK"
