# Step 11's claims, on 3 processes: while the group is up each process has extra threads
# and sockets; after destroy_process_group it is back where it started (no thread, no
# socket left), rank 0's rendezvous port is free again, and no process outlives the job.
for r in 0 1 2; do
  line=$(grep -E "^\[rank $r\] rank $r: threads" "$OUTPUT") || fail "rank $r did not report"
  read -r t0 t1 t2 s0 s1 s2 < <(sed -E 's/.*threads ([0-9]+) before init, ([0-9]+) in the group, ([0-9]+) after destroy; sockets ([0-9]+), ([0-9]+), ([0-9]+).*/\1 \2 \3 \4 \5 \6/' <<<"$line")
  holds "t1 > t0 && s1 > s0" "rank $r: the group has its own threads and sockets" t0="$t0" t1="$t1" s0="$s0" s1="$s1"
  holds "t2 == t0 && s2 == s0" "rank $r: destroy leaves none behind" t0="$t0" t2="$t2" s0="$s0" s2="$s2"
done
expect '^\[rank 0\] rank 0: rendezvous port [0-9]+ free again: yes' "the port is free again"
expect_count 3 'initialized after destroy: no' "no rank still has a group"
! pgrep -f "$root/$program" >/dev/null || fail "a process of the job is still running"
echo "ok: no process left"
