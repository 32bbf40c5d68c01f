#!/bin/bash
# clawgym: SLURM batch job of run 'run' (Ray submission clawgym-run-20260101_000000).
# Generated from the launch plan; `python train.py ... cluster=slurm dry_run=true` prints it.
# Secrets (W&B and SGLang keys) come from the environment sbatch was called with, never this file.
#SBATCH --job-name=run
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:8
#SBATCH --requeue
#SBATCH --signal=B:USR1@120
#SBATCH --open-mode=append
#SBATCH --output=/shared/ClawGym-RL/exp/run/clawgym/slurm/clawgym-run-20260101_000000/slurm-%j.out

set -u

PYTHON=/shared/venv/bin/python
PLAN=/shared/ClawGym-RL/exp/run/clawgym/snapshots/clawgym-run-20260101_000000/launch_plan.json
# Ray's own output goes here, next to this job's output.
LOG_DIR=/shared/ClawGym-RL/exp/run/clawgym/slurm/clawgym-run-20260101_000000
NODES=1
GPUS_PER_NODE=8
RUNNER=("$PYTHON" -m clawgym.backends.slurm_run)
SUPERVISED=("$PYTHON" -m clawgym.supervisor.slurm_runner)
RAY=("$PYTHON" -m ray.scripts.scripts)
# Every process of this job carries the marker: teardown finds Ray job drivers by it
# (Ray starts them in sessions of their own).
export CLAWGYM_HEAD_ID="slurm-${SLURM_JOB_ID}-${RANDOM}${RANDOM}"
unset RAY_ADDRESS
# The plan's head environment (Ray's health-check tuning).
export RAY_DASHBOARD_ENABLE_PROFILING=1
export RAY_health_check_failure_threshold=20
export RAY_health_check_period_ms=5000
export RAY_health_check_timeout_ms=30000
export RAY_num_heartbeats_timeout=60

runner_pid=""
head_pid=""
workers_pid=""

teardown() {
  trap '' TERM INT
  local began=$SECONDS
  if [ -n "$runner_pid" ]; then
    # The runner stops the Ray job (a few seconds at most), then exits.
    kill -TERM "$runner_pid" 2>/dev/null
    for _ in 1 2 3 4 5 6 7 8 9 10 11 12; do kill -0 "$runner_pid" 2>/dev/null || break; sleep 0.5; done
  fi
  # `ray start --block` ignores SIGTERM for about a minute once its GCS is gone: kill the process group.
  [ -n "$head_pid" ] && { kill -KILL -- "-$head_pid"; wait "$head_pid"; } 2>/dev/null
  # srun forwards TERM to every worker task, which kills its own Ray process group.
  [ -n "$workers_pid" ] && kill -TERM "$workers_pid" 2>/dev/null
  # Whatever still carries this job's marker on this node (e.g. job drivers in their own sessions),
  # before SLURM's SIGKILL of this shell KillWait seconds after its SIGTERM.
  "${RUNNER[@]}" reap
  # Ray's sockets and session logs of this job on this node, once nothing writes there any more;
  # bounded (an rm seen still running 25 s after scancel on a loaded CI machine), so that this
  # shell ends before SLURM's SIGKILL and leaves no process behind.
  [ -n "${TEMP_DIR:-}" ] && { timeout -k 1 5 rm -rf "$TEMP_DIR" || echo "[clawgym] could not remove $TEMP_DIR" >&2; }
  [ -n "$workers_pid" ] && wait "$workers_pid" 2>/dev/null
  echo "[clawgym] teardown done in $((SECONDS - began)) s" >&2
  return 0
}

on_signal() {
  echo "[clawgym] $1 received (scancel, a requeue or the time limit): stopping the Ray job and every Ray process of this job" >&2
  teardown
  exit 143
}
trap 'on_signal SIGTERM' TERM
trap 'on_signal SIGINT' INT

on_lead() {
  # SLURM's --signal lead (sbatch --signal=B:USR1@N): the time limit is near (or, with
  # slurm.conf's preempt_send_user_signal, a preemption). The runner records the attempt's end,
  # stops the Ray job and requeues this job within restart.max_attempts; SLURM then TERMs this shell.
  echo "[clawgym] SIGUSR1 received (SLURM's --signal lead): handing it to the supervisor" >&2
  # Noted first: a lead before the runner took USR1 (it starts with USR1 ignored) is read from here.
  : >"$LEAD_FILE"
  [ -n "$runner_pid" ] && kill -USR1 "$runner_pid" 2>/dev/null
  return 0
}
# This allocation's note of the lead (SLURM_RESTART_COUNT: sbatch(1), set once the job was requeued).
LEAD_FILE="$LOG_DIR/usr1-$SLURM_JOB_ID-${SLURM_RESTART_COUNT:-0}"
trap 'on_lead' USR1

# Preflight inside the allocation: the GPUs SLURM granted and free per-job ports on this node.
# It prints HEAD_IP, NODE_GPUS, GCS_PORT, DASHBOARD_PORT, CLIENT_PORT, AGENT_PORT and TEMP_DIR.
settings=$("${RUNNER[@]}" preflight "$PLAN" --nodes "$NODES" --gpus-per-node "$GPUS_PER_NODE") || exit 2
eval "$settings"

# Ray head on the first node (this one), in a process group of its own.
setsid "${RAY[@]}" start --head --block --disable-usage-stats --node-ip-address="$HEAD_IP" \
  --port="$GCS_PORT" --num-gpus="$NODE_GPUS" --dashboard-host=127.0.0.1 --dashboard-port="$DASHBOARD_PORT" \
  --ray-client-server-port="$CLIENT_PORT" --dashboard-agent-listen-port="$AGENT_PORT" \
  --min-worker-port=0 --max-worker-port=0 --temp-dir="$TEMP_DIR" >"$LOG_DIR/ray-head-$SLURM_JOB_ID.log" 2>&1 &
head_pid=$!

# Supervised (restart.enabled): the runner follows the run to its end in this allocation,
# restarting a crashed trainer from its last complete checkpoint, and requeues this job
# (scontrol requeue) when SLURM's USR1 says the time limit is near. It starts with USR1 ignored
# (USR1's default action ends a process): a lead before it took the signal is in $LEAD_FILE.
( trap '' USR1; exec "${SUPERVISED[@]}" run "$PLAN" --address "http://127.0.0.1:$DASHBOARD_PORT" --nodes "$NODES" \
  --gpus "$((NODES * GPUS_PER_NODE))" --head-ip "$HEAD_IP" --head-pid "$head_pid" \
  --wait-nodes 300 \
  --snapshot /shared/ClawGym-RL/exp/run/clawgym/snapshots/clawgym-run-20260101_000000 \
  --slurm-output /shared/ClawGym-RL/exp/run/clawgym/slurm/clawgym-run-20260101_000000/slurm-%j.out \
  --lead-file "$LEAD_FILE" ) &
runner_pid=$!
# wait returns early (status > 128) when a trapped signal arrives: wait again while it runs.
wait "$runner_pid"
rc=$?
while [ "$rc" -gt 128 ] && kill -0 "$runner_pid" 2>/dev/null; do wait "$runner_pid"; rc=$?; done
runner_pid=""
teardown
exit "$rc"
