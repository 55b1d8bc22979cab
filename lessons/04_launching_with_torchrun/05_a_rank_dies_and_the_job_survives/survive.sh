#!/usr/bin/env bash
# Lesson 4, step 5: the recap trained twice on 2 ranks, the second time with one rank
# killed (kill -9) at a random moment; `launch --max_restarts=1` starts the whole group
# again and the recap resumes from its last saved training state. Then the judge
# (same_weights) compares the two final checkpoints. Last, a whole machine lost: the same
# run on two machines of one rank each (emulated where it can), one machine's launcher
# killed and started again; the judge compares it with the first run too.
#   survive.sh path/to/same_weights
set -euo pipefail
root="${RUNFILES_DIR:-$0.runfiles}/ddp_engine"
[[ -x "$root/dist/launch" ]] || root="${TEST_SRCDIR:-$PWD}/ddp_engine"
[[ -x "$root/dist/launch" ]] || root="$PWD"
judge="$root/$1"
recap="$root/lessons/02_ddp_basics/13_recap_main"
launch="$root/dist/launch"
out="${LESSON_OUT:-${BUILD_WORKSPACE_DIRECTORY:-.}/out/04_survive}"
mkdir -p "$out/straight" "$out/resumed"
rm -f "$out"/straight/* "$out"/resumed/*
run=(--epochs 4 --train-limit 12000 --test-limit 1000 --save-every 10)

echo "1. the recap, uninterrupted: launch --nproc_per_node=2 13_recap ${run[*]}"
results="${LESSON_RESULTS:-$out/results.jsonl}"  # what each run reports (lessons::report)
rm -f "$results.straight" "$results.resumed"
LESSON_RESULTS="$results.straight" LESSON_OUT="$out/straight" "$launch" --nproc_per_node=2 "$recap" "${run[@]}" \
  --state "$out/straight/state.safetensors" --checkpoint "$out/straight/final.safetensors" | grep -E "epoch|checkpoint"

victim=$((RANDOM % 2))
delay_ms=$((RANDOM % 200))  # the training after the first save takes 300+ ms
echo "2. the same run under launch --max_restarts=1; rank $victim is killed with kill -9 ${delay_ms} ms after the first saved state"
LESSON_RESULTS="$results.resumed" LESSON_OUT="$out/resumed" "$launch" --nproc_per_node=2 --max_restarts=1 "$recap" "${run[@]}" \
  --state "$out/resumed/state.safetensors" --checkpoint "$out/resumed/final.safetensors" >"$out/resumed/log.txt" 2>&1 &
job=$!
# Up to 60 s for the first saved state (a second or so here; much more under a sanitizer).
for _ in $(seq 1 6000); do [[ -s "$out/resumed/state.safetensors" ]] || ! kill -0 $job 2>/dev/null && break; sleep 0.01; done
if [[ ! -s "$out/resumed/state.safetensors" ]]; then echo "no training state was saved within 60 s: nothing to resume from"; exit 1; fi
sleep "$(awk -v ms=$delay_ms 'BEGIN { print ms / 1000 }')"
pids=($(pgrep -P $job || true))
if [[ ${#pids[@]} -lt 2 ]]; then echo "the job ended before the kill: nothing to show"; exit 1; fi
# The launcher starts rank 0 first: its children in pid order are ranks 0 and 1.
target=$(printf '%s\n' "${pids[@]}" | sort -n | sed -n "$((victim + 1))p")
kill -9 "$target"
echo "   killed rank $victim (pid $target)"
wait $job
grep -E "epoch|resumed|launch:|checkpoint" "$out/resumed/log.txt" | grep -v "^\[rank 1\]"

echo "3. the judge: the two final checkpoints"
"$judge" "$out/straight/final.safetensors" "$out/resumed/final.safetensors"

# 4. A whole machine lost: its launcher dies and its rank with it (power, a kernel panic, a
# preempted VM), and the machine comes back. Two machines of one rank each (the same world
# of 2, so the same run as 1.), emulated where this machine can make them (tools/nodes.sh:
# each has its own address, hostname and /dev/shm), else two launchers here.
lost=$((RANDOM % 2))
rm -rf "$out/machines"
mkdir -p "$out/machines"
token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
nodes="$root/tools/nodes.sh"
if why=$(bash "$nodes" check 2>&1); then
  eval "$(bash "$nodes" up 2)"
  trap 'bash "$nodes" down "$NODES_ID"' EXIT
  trap 'exit 1' TERM INT  # a timeout or ^C still removes the machines
  where="two emulated machines (tools/nodes.sh) at $NODE0_ADDR and $NODE1_ADDR"
  master=$NODE0_ADDR port=29500
  on_machine() { local k=$1; shift; exec bash "$nodes" run "$NODES_ID" "$k" "$@"; }
else
  where="two launchers on this machine (cannot emulate machines here: $why)"
  master=127.0.0.1
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  on_machine() { shift; exec "$@"; }
fi
echo "4. a whole machine lost, on $where: launch --nnodes=2 --nproc_per_node=1 --max_restarts=1 on each;"
echo "   machine $lost's launcher is killed with kill -9 after the first saved state, its rank goes with it, and it is started again 1 s later"
job=(--nnodes=2 --nproc_per_node=1 --max_restarts=1 --master_addr="$master" --master_port="$port" --job_token="$token")
start_machine() {  # start_machine K SUFFIX: machine K's launcher, in the background (its pid: machine_pid)
  LESSON_OUT="$out/machines/$1" on_machine "$1" "$launch" "${job[@]}" --node_rank="$1" "$recap" "${run[@]}" \
    --state "$out/machines/state.safetensors" --checkpoint "$out/machines/final$1.safetensors" \
    >"$out/machines/log$1$2.txt" 2>&1 &
  machine_pid=$!
}
start_machine 0 "" && machine[0]=$machine_pid
start_machine 1 "" && machine[1]=$machine_pid
for _ in $(seq 1 6000); do [[ -s "$out/machines/state.safetensors" ]] && break; sleep 0.01; done
if [[ ! -s "$out/machines/state.safetensors" ]]; then echo "no training state was saved within 60 s: nothing to resume from"; exit 1; fi
# The background job is the launcher itself (on_machine, nodes.sh and what it runs exec it).
{ kill -9 "${machine[$lost]}" && wait "${machine[$lost]}"; } 2>/dev/null || true  # (and no "Killed" line)
echo "   killed machine $lost's launcher (pid ${machine[$lost]})"
sleep 1
start_machine "$lost" ".again" && machine[$lost]=$machine_pid
wait "${machine[0]}" "${machine[1]}"
other=$((1 - lost))
grep -hE "launch: .*restarting|joining the job's restart|resumed from|epoch  4" \
  "$out/machines/log$other.txt" "$out/machines/log$lost.again.txt" | sed "s/^/   /"
echo "   the judge: the uninterrupted run of 1. against this one"
"$judge" "$out/straight/final.safetensors" "$out/machines/final0.safetensors" | sed "s/^/   /"

# 5. A job told to stop: a scheduler preempting it (or Slurm at its time limit, or
# `timeout`) sends SIGTERM to every process of the job, and SIGKILL a while later. The
# launcher passes its own on, so each rank is asked twice; the recap stops after a step
# every rank agrees on, saves it, and exits 143; the same command with --resume ends
# bit-identical to 1. (setsid: the job in a process group of its own, as a scheduler starts it.)
rm -rf "$out/stopped" && mkdir -p "$out/stopped"
delay_ms=$((RANDOM % 300))
echo "5. the same run, sent SIGTERM (the launcher and every rank) ${delay_ms} ms after the first saved state (a scheduler preempting the job); then the same command with --resume"
stopped=(--state "$out/stopped/state.safetensors" --checkpoint "$out/stopped/final.safetensors")
LESSON_OUT="$out/stopped" setsid "$launch" --nproc_per_node=2 "$recap" "${run[@]}" "${stopped[@]}" >"$out/stopped/log.txt" 2>&1 &
job=$!
for _ in $(seq 1 6000); do [[ -s "$out/stopped/state.safetensors" ]] || ! kill -0 $job 2>/dev/null && break; sleep 0.01; done
sleep "$(awk -v ms=$delay_ms 'BEGIN { print ms / 1000 }')"
kill -TERM -- -$job 2>/dev/null || true
status=0 && wait $job || status=$?
{ grep -E "asked to stop|launch:" "$out/stopped/log.txt" || true; } | sed "s/^/   /"
echo "   exit status $status"
LESSON_OUT="$out/stopped" "$launch" --nproc_per_node=2 "$recap" "${run[@]}" "${stopped[@]}" --resume 2>&1 |
  grep -E "resumed from|epoch  4" | sed "s/^/   /"
"$judge" "$out/straight/final.safetensors" "$out/stopped/final.safetensors" | sed "s/^/   stopped and resumed: /"
