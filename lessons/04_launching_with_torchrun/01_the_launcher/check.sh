# Step 1's claims, on 3 processes: each gets its RANK and LOCAL_RANK, all the same
# WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK (the node), rendezvous address and job token;
# init_process_group reads exactly those; every line is labelled with its rank.
for r in 0 1 2; do
  expect "^\[rank $r\] my environment: RANK=$r LOCAL_RANK=$r WORLD_SIZE=3 LOCAL_WORLD_SIZE=3 GROUP_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=[0-9]+ TORCHELASTIC_RESTART_COUNT=0 ENGINE_JOB_TOKEN=<32 characters>" "rank $r's environment"
  expect "^\[rank $r\] init_process_group read: rank $r of 3, local rank $r of 3 \(from torchrun-style variables\)" "rank $r's group"
done
[[ $(fields 'MASTER_PORT=([0-9]+)' | sort -u | wc -l) -eq 1 ]] || fail "the ranks got different ports"
echo "ok: one rendezvous port"
expect_none '^[^[]' "every line is labelled with its rank"
