# Step 13, the recap, small: 2 processes train on 4000 images for 2 epochs. Only rank 0
# prints the epoch lines, saves the checkpoint and draws the curves; the model learns; the
# picture shows exactly the printed numbers; the job ends cleanly.
expect '^\[rank 0\] Fashion-MNIST, mlp, DDP over 2 processes \(gloo\)' "rank 0 prints the header"
expect_count 2 '^\[rank 0\] epoch' "rank 0 prints 2 epoch lines"
expect_none '^\[rank 1\] epoch' "rank 1 prints no epoch line"
acc=$(result accuracy_epoch_2)
holds "acc > 70" "it learns: accuracy after 2 epochs on 4000 images" acc="$acc"
expect "^\[rank 0\] checkpoint saved by rank 0: $LESSON_OUT/ddp_mlp.safetensors" "rank 0 saves"
[[ -s "$LESSON_OUT/ddp_mlp.safetensors" ]] || fail "the checkpoint is missing"
# The CSV holds the printed numbers, and the picture shows the CSV.
while IFS=, read -r epoch loss accuracy; do
  [[ $epoch == epoch ]] && continue
  reported=$(result "loss_epoch_$epoch")
  holds "(p - l) ^ 2 < 1e-8" "epoch $epoch: the curve's loss is the epoch's loss" p="$reported" l="$loss"
done <"$LESSON_OUT/curves.csv"
"$root/lessons/common/chart_check" "$LESSON_OUT/curves.png" "Fashion-MNIST mlp" "DDP x2=$LESSON_OUT/curves.csv" ||
  fail "the picture does not show the run"
# One process and DDP on one chart: the same run on 1 process leaves curves_1_process.csv,
# and the next DDP run draws its curves beside those.
small=(--epochs 2 --train-limit 4000 --test-limit 2000)
recap="$root/lessons/02_ddp_basics/13_recap_main"
LESSON_RESULTS="$LESSON_RESULTS.one" "$root/dist/launch" --nproc_per_node=1 "$recap" "${small[@]}" >"$TEST_TMPDIR/one.txt" 2>&1 ||
  { cat "$TEST_TMPDIR/one.txt"; fail "the recap on 1 process failed"; }
[[ -s "$LESSON_OUT/curves_1_process.csv" ]] || fail "the run on 1 process should leave curves_1_process.csv"
"$root/dist/launch" --nproc_per_node=2 "$recap" "${small[@]}" >"$TEST_TMPDIR/two.txt" 2>&1 ||
  { cat "$TEST_TMPDIR/two.txt"; fail "the recap on 2 processes failed"; }
grep -q "curves drawn by rank 0: .*curves.png, DDP x2 beside 1 process" "$TEST_TMPDIR/two.txt" ||
  fail "the DDP run should draw one process beside it: $(grep curves "$TEST_TMPDIR/two.txt")"
"$root/lessons/common/chart_check" "$LESSON_OUT/curves.png" "Fashion-MNIST mlp" "DDP x2=$LESSON_OUT/curves.csv" \
  "1 process=$LESSON_OUT/curves_1_process.csv" || fail "the picture does not show both runs"
echo "ok: one picture shows DDP x2 and 1 process, every point of each"
# One process's curves are drawn beside a DDP run's only when both ran with the same
# settings: beside a run with another learning rate they would compare nothing.
"$root/dist/launch" --nproc_per_node=2 "$recap" "${small[@]}" --lr 0.2 --state "$TEST_TMPDIR/other_state.safetensors" \
  --checkpoint "$TEST_TMPDIR/other.safetensors" >"$TEST_TMPDIR/other_settings.txt" 2>&1 ||
  { cat "$TEST_TMPDIR/other_settings.txt"; fail "the recap with --lr 0.2 failed"; }
grep -q "curves_1_process.csv is from a run with model mlp, epochs 2, batch 64, train-limit 4000, lr 0.1, .*so it is not drawn beside this one (.*lr 0.2" \
  "$TEST_TMPDIR/other_settings.txt" || fail "another run's curves should not be drawn beside: $(grep curves "$TEST_TMPDIR/other_settings.txt")"
"$root/lessons/common/chart_check" "$LESSON_OUT/curves.png" "Fashion-MNIST mlp" "DDP x2=$LESSON_OUT/curves.csv" ||
  fail "the picture should show this run alone"
echo "ok: one process's curves are drawn beside only a run with the same settings"
# The recap on 2 ranks, rank 1 started by the command line $2 (ending in exec "$@" ...), as
# another machine might start it, the others as usual: the output in $TEST_TMPDIR/$1.txt;
# the test fails, saying $3, if the job succeeds.
rank1_differs() {
  local name=$1 rank1=$2 why=$3
  shift 3
  printf '#!/usr/bin/env bash\nif [[ $RANK == 1 ]]; then %s; else exec "$@"; fi\n' "$rank1" >"$TEST_TMPDIR/$name.sh"
  chmod +x "$TEST_TMPDIR/$name.sh"
  if "$root/dist/launch" --nproc_per_node=2 "$TEST_TMPDIR/$name.sh" "$recap" "$@" >"$TEST_TMPDIR/$name.txt" 2>&1; then
    fail "$why"
  fi
}
# Ranks started with different flags (here rank 1 with another learning rate, as a second
# machine's launcher might be) are refused at the start, each naming its own settings.
rank1_differs other_lr 'exec "$@" --lr 0.2' "ranks with different learning rates should be refused" \
  --epochs 1 --train-limit 500
grep -q "^\[rank 1\] 13_recap: \[recap\] the ranks were started with different settings; rank 1 has .*, lr 0.2," \
  "$TEST_TMPDIR/other_lr.txt" || fail "rank 1 should name its settings: $(cat "$TEST_TMPDIR/other_lr.txt")"
echo "ok: ranks started with different flags are refused, each naming its settings"
# A machine whose copy of the dataset differs (here one label of the first 500 changed, in
# a copy rank 1 reads through FASHION_MNIST_DIR) would train on silently: refused at the
# start, every rank naming its own copy.
data="${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}"
mkdir -p "$TEST_TMPDIR/other_data"
cp "$data"/*.gz "$TEST_TMPDIR/other_data/"
zcat "$data/train-labels-idx1-ubyte.gz" >"$TEST_TMPDIR/labels"
label=$(od -An -tu1 -j 108 -N 1 "$TEST_TMPDIR/labels" | tr -d ' ')  # image 100's label (8 bytes of header)
printf "\\$(printf %o $(((label + 1) % 10)))" | dd of="$TEST_TMPDIR/labels" bs=1 seek=108 conv=notrunc status=none
gzip -c "$TEST_TMPDIR/labels" >"$TEST_TMPDIR/other_data/train-labels-idx1-ubyte.gz"
rank1_differs other_data 'FASHION_MNIST_DIR="$TEST_TMPDIR/other_data" exec "$@"' \
  "ranks that read different data should be refused" --epochs 1 --train-limit 500
grep -q "^\[rank 1\] 13_recap: \[recap\] the training set ($TEST_TMPDIR/other_data) differs between the ranks: rank 1 has 500 samples, fingerprint 0x[0-9a-f/]* (the same count on every rank, other contents)" \
  "$TEST_TMPDIR/other_data.txt" || fail "rank 1 should name its copy of the data: $(cat "$TEST_TMPDIR/other_data.txt")"
grep -q "^\[rank 0\] 13_recap: \[recap\] the training set ($data) differs between the ranks: rank 0 has 500 samples" \
  "$TEST_TMPDIR/other_data.txt" || fail "rank 0 should name its copy of the data: $(cat "$TEST_TMPDIR/other_data.txt")"
echo "ok: a rank reading a copy of the data with one label changed is refused, every rank naming its copy"
# A training state that only some ranks can read (on one machine's disk, not the other's)
# would resume those ranks and start the rest afresh with other weights: every rank stops
# at the start instead, naming what it found. Here rank 1 is pointed at a missing file.
rank1_differs no_state 'exec "$@" --state "$TEST_TMPDIR/missing.safetensors"' \
  "ranks that find different training states should be refused" "${small[@]}" --resume
grep -q "^\[rank 1\] 13_recap: \[resume\] the ranks do not start from the same point: rank 1 found no training state" \
  "$TEST_TMPDIR/no_state.txt" || fail "rank 1 should say it found no state: $(cat "$TEST_TMPDIR/no_state.txt")"
grep -q "^\[rank 0\] 13_recap: \[resume\] .*rank 0 resumed from $LESSON_OUT/state_mlp.safetensors at epoch 3" \
  "$TEST_TMPDIR/no_state.txt" || fail "rank 0 should say where it resumed: $(cat "$TEST_TMPDIR/no_state.txt")"
echo "ok: a training state that only some ranks can read is refused at the start, on every rank"
# A learning rate far too high: the weights reach NaN within the first epoch, and every
# later step would be NaN too. Every rank stops there, rank 0 saying why, and nothing is
# saved over the last good training state or checkpoint; the picture shows the epoch's
# accuracy and says the loss was not finite.
cp "$LESSON_OUT/state_mlp.safetensors" "$TEST_TMPDIR/state_before.safetensors"
cp "$LESSON_OUT/ddp_mlp.safetensors" "$TEST_TMPDIR/checkpoint_before.safetensors"
if "$root/dist/launch" --nproc_per_node=2 "$recap" --epochs 2 --train-limit 1000 --test-limit 500 --lr 100 \
  >"$TEST_TMPDIR/diverged.txt" 2>&1; then
  fail "a run whose weights became NaN should stop with an error"
fi
grep -q "^\[rank 0\] epoch  1  loss nan " "$TEST_TMPDIR/diverged.txt" ||
  fail "epoch 1's line should show loss nan: $(cat "$TEST_TMPDIR/diverged.txt")"
grep -q "^\[rank 0\] 13_recap: training diverged in epoch 1: the model's \".*\" holds NaN or inf.*Nothing was saved" \
  "$TEST_TMPDIR/diverged.txt" || fail "rank 0 should say the run diverged: $(cat "$TEST_TMPDIR/diverged.txt")"
grep -q "^\[rank 1\] 13_recap: training diverged in epoch 1 (on every rank: rank 0 says more)" \
  "$TEST_TMPDIR/diverged.txt" || fail "rank 1 should stop too: $(cat "$TEST_TMPDIR/diverged.txt")"
grep -q "^launch: rank 0 (pid [0-9]*) exited with status 1" "$TEST_TMPDIR/diverged.txt" ||
  fail "the launcher should name rank 0, whose error explains: $(grep '^launch' "$TEST_TMPDIR/diverged.txt")"
grep -q "^\[rank 0\] epoch  2" "$TEST_TMPDIR/diverged.txt" && fail "no epoch should follow the one that diverged"
cmp -s "$LESSON_OUT/state_mlp.safetensors" "$TEST_TMPDIR/state_before.safetensors" ||
  fail "the training state was overwritten by a diverged run"
cmp -s "$LESSON_OUT/ddp_mlp.safetensors" "$TEST_TMPDIR/checkpoint_before.safetensors" ||
  fail "the checkpoint was overwritten by a diverged run"
grep -qx "1,nan,.*" "$LESSON_OUT/curves.csv" || fail "curves.csv should hold epoch 1's nan: $(cat "$LESSON_OUT/curves.csv")"
"$root/lessons/common/chart_check" "$LESSON_OUT/curves.png" "Fashion-MNIST mlp" "DDP x2=$LESSON_OUT/curves.csv" ||
  fail "the picture does not show the diverged run's finite points"
echo "ok: a run that diverges stops at once, says why, and keeps the last good state"
# --twin (step 14) into a folder an earlier run with more ranks used: the comparison counts
# ranks by their files, so the files of ranks this run does not have are removed.
mkdir -p "$TEST_TMPDIR/twin"
touch "$TEST_TMPDIR/twin/losses_rank5.txt" "$TEST_TMPDIR/twin/order_rank2.txt" "$TEST_TMPDIR/twin/notes_rank3.txt"
"$root/dist/launch" --nproc_per_node=2 "$recap" --epochs 1 --train-limit 600 --test-limit 100 --twin "$TEST_TMPDIR/twin" \
  --state "$TEST_TMPDIR/twin_state.safetensors" --checkpoint "$TEST_TMPDIR/twin.safetensors" >"$TEST_TMPDIR/twin.txt" 2>&1 ||
  { cat "$TEST_TMPDIR/twin.txt"; fail "the recap with --twin failed"; }
left=$(cd "$TEST_TMPDIR/twin" && ls | grep -E '_rank[0-9]+\.txt$' | sort | tr '\n' ' ')
[[ "$left" == "losses_rank0.txt losses_rank1.txt notes_rank3.txt order_rank0.txt order_rank1.txt " ]] ||
  fail "--twin should leave the files of ranks 0 and 1 only (and files not its own), found: $left"
echo "ok: --twin removes the files an earlier run left for ranks this one does not have"
# A state saved by 2 ranks in the middle of an epoch: each rank's slice of the data depends
# on the world size, so 1 rank cannot take up the rest of that epoch (refused, saying why);
# 2 ranks can. The job is killed just after its first save (step 5 of 157 in epoch 1).
mid=(--epochs 2 --train-limit 20000 --test-limit 200 --save-every 5 --state "$TEST_TMPDIR/mid_state.safetensors"
  --checkpoint "$TEST_TMPDIR/mid.safetensors")
"$root/dist/launch" --nproc_per_node=2 "$recap" "${mid[@]}" >"$TEST_TMPDIR/mid.txt" 2>&1 &
job=$!
for _ in $(seq 1 6000); do [[ -s "$TEST_TMPDIR/mid_state.safetensors" ]] || ! kill -0 $job 2>/dev/null && break; sleep 0.01; done
kill -9 $job 2>/dev/null || true
wait $job 2>/dev/null || true
# Its ranks end on the launcher's death (SIGTERM); rank 0 holds the state's lock until then.
for _ in $(seq 1 1000); do pgrep -f -- "--state $TEST_TMPDIR/mid_state.safetensors" >/dev/null || break; sleep 0.01; done
[[ -s "$TEST_TMPDIR/mid_state.safetensors" ]] || fail "no training state was saved: $(cat "$TEST_TMPDIR/mid.txt")"
if "$root/dist/launch" --nproc_per_node=1 "$recap" "${mid[@]}" --resume >"$TEST_TMPDIR/mid_one.txt" 2>&1; then
  fail "1 rank should not resume 2 ranks' state from the middle of an epoch: $(cat "$TEST_TMPDIR/mid_one.txt")"
fi
grep -q "was saved by 2 ranks in the middle of epoch 1 (after batch [0-9]*): with 1 rank each rank's slice of the data differs" \
  "$TEST_TMPDIR/mid_one.txt" || fail "the refusal should say why: $(cat "$TEST_TMPDIR/mid_one.txt")"
"$root/dist/launch" --nproc_per_node=2 "$recap" "${mid[@]}" --resume >"$TEST_TMPDIR/mid_two.txt" 2>&1 ||
  { cat "$TEST_TMPDIR/mid_two.txt"; fail "2 ranks should resume their own state"; }
grep -q "^\[rank 0\] resumed from $TEST_TMPDIR/mid_state.safetensors: epoch 1, after batch [1-9]" "$TEST_TMPDIR/mid_two.txt" ||
  fail "2 ranks should resume in epoch 1: $(grep -i resum "$TEST_TMPDIR/mid_two.txt")"
echo "ok: a state from the middle of an epoch is resumed by as many ranks as saved it, and refused by others, saying why"
# Told to stop (SIGTERM) at an epoch's last step: 1024 images are 8 steps an epoch on 2
# ranks, and the recap asks every 8 steps, so it stops exactly there. Resumed, the epoch's
# end (evaluation, curves) runs in the new process, and the weights end bit-identical to a
# run never stopped; resumed once more, a finished run has nothing left to train.
edge=(--epochs 120 --train-limit 1024 --test-limit 100)
for name in straight stopped; do
  "$root/dist/launch" --nproc_per_node=2 "$recap" "${edge[@]}" --state "$TEST_TMPDIR/edge_$name.st" \
    --checkpoint "$TEST_TMPDIR/edge_$name.safetensors" >"$TEST_TMPDIR/edge_$name.txt" 2>&1 &
  job=$!
  if [[ $name == stopped ]]; then
    for _ in $(seq 1 6000); do [[ -s "$TEST_TMPDIR/edge_$name.st" ]] || ! kill -0 $job 2>/dev/null && break; sleep 0.01; done
    kill -TERM $job 2>/dev/null || true
  fi
  wait $job || true
done
grep -q "asked to stop by SIGTERM: stopped after step [0-9]* (epoch [0-9]*, batch 8 of 8)" "$TEST_TMPDIR/edge_stopped.txt" ||
  fail "the recap should stop at an epoch's last step: $(cat "$TEST_TMPDIR/edge_stopped.txt")"
for pass in resumed finished; do
  "$root/dist/launch" --nproc_per_node=2 "$recap" "${edge[@]}" --state "$TEST_TMPDIR/edge_stopped.st" \
    --checkpoint "$TEST_TMPDIR/edge_stopped.safetensors" --resume >"$TEST_TMPDIR/edge_$pass.txt" 2>&1 ||
    { cat "$TEST_TMPDIR/edge_$pass.txt"; fail "the $pass run failed"; }
done
grep -q "^\[rank 0\] epoch *[0-9]*  loss [0-9.]*  test accuracy [0-9.]*%  (its steps ran before the resume)" \
  "$TEST_TMPDIR/edge_resumed.txt" || fail "the resumed epoch should say its steps ran before: $(cat "$TEST_TMPDIR/edge_resumed.txt")"
grep -q "^\[rank 0\] resumed from .*edge_stopped.st: all 120 epochs were done (step 960); nothing is left to train" \
  "$TEST_TMPDIR/edge_finished.txt" || fail "a finished run should say so: $(cat "$TEST_TMPDIR/edge_finished.txt")"
cmp -s "$TEST_TMPDIR/edge_straight.safetensors" "$TEST_TMPDIR/edge_stopped.safetensors" ||
  fail "stopped at an epoch's last step and resumed, the weights should be bit-identical"
echo "ok: stopped by SIGTERM at an epoch's last step and resumed, the run ends bit-identical"
# The launcher killed (kill -9, the out-of-memory killer): its ranks are sent SIGTERM and
# stop on request, although their output now leads nowhere. Rank 0 used to die of SIGPIPE at
# its next epoch line, before it saved. 128 images are 1 step an epoch on 2 ranks, so there
# is an epoch line after every step; the save on request is the one after batch 1 of 1 (an
# epoch's own save is "after batch 0") at a step the ranks ask at (every 8th).
orphan=(--epochs 5000 --train-limit 128 --test-limit 100 --state "$TEST_TMPDIR/orphan.st" --checkpoint "$TEST_TMPDIR/orphan.safetensors")
"$root/dist/launch" --nproc_per_node=2 "$recap" "${orphan[@]}" >"$TEST_TMPDIR/orphan.txt" 2>&1 &
job=$!
for _ in $(seq 1 6000); do [[ -s "$TEST_TMPDIR/orphan.st" ]] || ! kill -0 $job 2>/dev/null && break; sleep 0.01; done
sleep 0.3
kill -9 $job 2>/dev/null || true
wait $job 2>/dev/null || true
for _ in $(seq 1 1000); do pgrep -f -- "--state $TEST_TMPDIR/orphan.st" >/dev/null || break; sleep 0.01; done
pgrep -f -- "--state $TEST_TMPDIR/orphan.st" >/dev/null && { pkill -9 -f -- "--state $TEST_TMPDIR/orphan.st"; fail "the ranks should end within 10 s of their launcher"; }
# A safetensors file opens with its header's length (8 bytes, little-endian), then the header.
# The header holds the curves, one entry an epoch, so it grows the longer the run goes.
length=$(od -An -t u8 -N 8 "$TEST_TMPDIR/orphan.st" | tr -d ' ')
header=$(head -c $((length + 8)) "$TEST_TMPDIR/orphan.st" | tail -c +9)
[[ $header =~ \"batch\":\"([0-9]+)\" ]] && batch=${BASH_REMATCH[1]} || fail "no batch in the state's header: ${header:0:300}"
[[ $header =~ \"step\":\"([0-9]+)\" ]] && step=${BASH_REMATCH[1]} || fail "no step in the state's header: ${header:0:300}"
[[ $batch == 1 && $((step % 8)) == 0 ]] ||
  fail "the ranks of a killed launcher should save where they stop (after batch 1, at a step that is a multiple of 8), but the state holds batch $batch, step $step: $(tail -3 "$TEST_TMPDIR/orphan.txt")"
echo "ok: the ranks of a launcher killed with kill -9 stop on request and save (step $step), with nowhere to print"
# Two jobs given one training state (the demo started twice in one folder): the second is
# refused at its start, naming the first's rank 0, before it saves anything. Before, each
# overwrote the other's saves, and the first, restarted after a failure, resumed from the
# second's progress. The first trains on; stopped, it saves, and resumes its own state.
first=(--epochs 5000 --train-limit 1024 --test-limit 100 --state "$TEST_TMPDIR/shared.st" --checkpoint "$TEST_TMPDIR/first.safetensors")
"$root/dist/launch" --nproc_per_node=2 "$recap" "${first[@]}" >"$TEST_TMPDIR/first.txt" 2>&1 &
job=$!
for _ in $(seq 1 6000); do [[ -s "$TEST_TMPDIR/shared.st" ]] || ! kill -0 $job 2>/dev/null && break; sleep 0.01; done
if "$root/dist/launch" --nproc_per_node=2 "$recap" --epochs 1 --train-limit 1024 --test-limit 100 \
  --state "$TEST_TMPDIR/shared.st" --checkpoint "$TEST_TMPDIR/second.safetensors" >"$TEST_TMPDIR/second.txt" 2>&1; then
  kill $job
  fail "a second job saving to the same training state should be refused: $(cat "$TEST_TMPDIR/second.txt")"
fi
line=$(grep "^\[rank 0\] 13_recap: \[checkpoint\] another run is saving to $TEST_TMPDIR/shared.st (the training state, --state): its lock, $TEST_TMPDIR/shared.st.lock, is held by pid [0-9]* on host " \
  "$TEST_TMPDIR/second.txt") || { kill $job; fail "the second job should name the holder: $(cat "$TEST_TMPDIR/second.txt")"; }
[[ $line =~ "held by pid "([0-9]+) ]] && holder=${BASH_REMATCH[1]}
[[ $(ps -o ppid= -p "$holder" | tr -d ' ') == "$job" ]] ||
  { kill $job; fail "the pid named ($holder) should be the first job's rank 0, a child of its launcher $job"; }
[[ ! -e "$TEST_TMPDIR/second.safetensors" ]] || fail "the refused job should have saved nothing"
kill -TERM $job
wait $job || true
grep -q "asked to stop by SIGTERM: stopped after step" "$TEST_TMPDIR/first.txt" ||
  fail "the first job should have trained on, and stopped on request: $(tail -3 "$TEST_TMPDIR/first.txt")"
"$root/dist/launch" --nproc_per_node=2 "$recap" "${first[@]}" --resume >"$TEST_TMPDIR/first_again.txt" 2>&1 &
job=$!
for _ in $(seq 1 6000); do grep -q "resumed from" "$TEST_TMPDIR/first_again.txt" || ! kill -0 $job 2>/dev/null && break; sleep 0.01; done
kill -TERM $job 2>/dev/null || true
wait $job || true
grep -q "^\[rank 0\] resumed from $TEST_TMPDIR/shared.st: epoch [0-9]*, after batch" "$TEST_TMPDIR/first_again.txt" ||
  fail "the first job should resume its own state, once it had ended: $(cat "$TEST_TMPDIR/first_again.txt")"
echo "ok: a second job saving to the same training state is refused at its start, naming the first job's rank 0"
# One file given for both saves, written two ways: the final weights replaced the training
# state, and the run could not be resumed ("has no format in its metadata"). Refused at the
# start, before any training or save.
ln -sfn . "$TEST_TMPDIR/here"
if "$root/dist/launch" --nproc_per_node=2 "$recap" --epochs 1 --train-limit 256 --test-limit 100 \
  --state "$TEST_TMPDIR/one.st" --checkpoint "$TEST_TMPDIR/here/./one.st" >"$TEST_TMPDIR/one.txt" 2>&1; then
  fail "one path for --state and --checkpoint should be refused: $(cat "$TEST_TMPDIR/one.txt")"
fi
grep -qF "[rank 0] 13_recap: [save_safetensors] --state (the training state) and --checkpoint (the final weights) both name $TEST_TMPDIR/one.st ($TEST_TMPDIR/here/./one.st): one save would replace the other" \
  "$TEST_TMPDIR/one.txt" && ! grep -q "^\[rank 0\] epoch" "$TEST_TMPDIR/one.txt" && [[ ! -e "$TEST_TMPDIR/one.st" ]] ||
  fail "one path for --state and --checkpoint should be refused at the start, naming both: $(cat "$TEST_TMPDIR/one.txt")"
echo "ok: one file given as both --state and --checkpoint (through a linked folder) is refused at the start"
