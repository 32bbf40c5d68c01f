"""``cluster=slurm``: one SLURM batch job per run, with Ray started across its allocation.

The login-node side (this module):

1. :func:`allocation` sizes the job from the layout (nodes, GPUs per node).
2. :func:`batch_script` renders the batch script, a pure function of the plan and the
   resolved config (golden-tested; ``dry_run=true`` prints it). The script starts a Ray
   head on the first node and one worker per other node through ``srun``, on ports
   picked free inside the allocation, with the plan's head environment; it hands the
   plan to ``python -m clawgym.backends.slurm_run run`` (which waits for every node's
   GPUs, submits the plan as a Ray job with clawgym's own submission code, follows it and
   stamps checkpoints) and exits with the job's status. On SIGTERM (``scancel``, or
   ``--signal`` before the time limit) it stops the Ray job, then kills every Ray process
   of the job at once: whole process groups plus every process carrying the job's
   marker (Ray starts job drivers in sessions of their own, and ``ray start --block``
   ignores SIGTERM for about a minute once its GCS is gone).
3. :func:`launch` runs preflight (sandbox and checkpoint on the shared filesystem),
   writes the snapshot and the script next to it, calls ``sbatch`` with the secrets in
   its environment only, prints the SLURM job id and follows the job's output until it
   ends (or returns at once with ``ray.detach=true``); Ctrl-C is ``scancel``.

Secrets reach the job through the environment ``sbatch`` is called with (SLURM's
default ``--export=ALL``), never through the script or its command line.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

from clawgym.backends import ClusterPerJobBackend
from clawgym.plan.allocation import Allocation, allocation
from clawgym.plan.build import LaunchPlan

#: Module that runs inside the allocation.
RUNNER_MODULE = "clawgym.backends.slurm_run"
#: Module that runs the job inside the allocation when the run is supervised (restart.enabled):
#: clawgym/supervisor/slurm_runner.py, named here as a string (backends never import the supervisor).
SUPERVISED_RUNNER_MODULE = "clawgym.supervisor.slurm_runner"
#: File names kept next to the launch snapshot.
SCRIPT_FILE = "slurm_batch.sh"
#: Beside the batch script: the SLURM job whose supervision it is and where that began in attempts.json
#: (written by the supervised runner in the job's first allocation; read on its requeued starts and by
#: whoever closes the record of a job cancelled between two allocations).
SUPERVISION_FILE = "supervision.json"
#: SLURM job states after which nothing changes.
TERMINAL_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
                   "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT")
#: Exit status of a stopped (cancelled) run, as for a stopped Ray job.
EXIT_STOPPED = 130


class SlurmError(Exception):
    """sbatch/scontrol/scancel failed; the message says why and what to do."""


def sbatch_directives(c: Mapping[str, Any], alloc: Allocation, *, output: str) -> List[str]:
    """The ``#SBATCH`` options, in the order sbatch's manual lists them; unset keys are omitted."""
    s = c["slurm"]
    gres = f"gpu:{s['gpu_type']}:{alloc.gpus_per_node}" if s["gpu_type"] else f"gpu:{alloc.gpus_per_node}"
    out = [f"--job-name={s['job_name']}"]
    for key, opt in (("partition", "partition"), ("account", "account"), ("qos", "qos"), ("time", "time")):
        if s[key] not in (None, ""):
            out.append(f"--{opt}={s[key]}")
    out += [f"--nodes={alloc.nodes}", "--ntasks-per-node=1"]
    if alloc.gpus_per_node > 0:
        out.append(f"--gres={gres}")
    if s["cpus_per_node"]:
        out.append(f"--cpus-per-task={s['cpus_per_node']}")
    if s["mem_per_node"] not in (None, ""):
        out.append(f"--mem={s['mem_per_node']}")
    if supervised(c):
        # The run goes on after a preemption, a node failure or its time limit: SLURM may requeue it
        # (sbatch(1) --requeue), and the supervisor in the allocation requeues it itself at the lead.
        out.append("--requeue")
        # B: only the batch shell gets it (sbatch(1) --signal). USR1, not TERM: a TERM is also what
        # scancel sends, and a user's scancel stops the run for good while the lead requeues it.
        out.append(f"--signal=B:USR1@{int(s['signal_delay_s'])}")
        # Every allocation's output in one file (sbatch(1) --open-mode): a requeued start would truncate it.
        out.append("--open-mode=append")
    else:
        # B: the signal goes to the batch shell, which stops the Ray job and Ray before the limit.
        out.append(f"--signal=B:TERM@{int(s['signal_delay_s'])}")
    out.append(f"--output={output}")
    out += [str(line) for line in s["extra_sbatch"]]
    return out


def supervised(c: Mapping[str, Any]) -> bool:
    """True when the run is supervised to its end in its allocation (restart.enabled, the default)."""
    return bool((c.get("restart") or {}).get("enabled", True))


def _q(value: Any) -> str:
    return shlex.quote(str(value))


def batch_script(plan: LaunchPlan, c: Mapping[str, Any], *, plan_file: str, output: str, python: str,
                 snapshot: Optional[str] = None) -> str:
    """The batch script of a run: a pure function of the plan, the resolved config and where files are.

    ``plan_file`` is the plan the allocation submits, ``output`` sbatch's output file
    pattern, ``python`` the interpreter that runs clawgym there, ``snapshot`` the launch
    snapshot whose config is stamped into checkpoints.
    """
    alloc = allocation(c)
    s = c["slurm"]
    head_ip = s["head_ip"] or ""
    lines = [
        "#!/bin/bash",
        f"# clawgym: SLURM batch job of run {plan.run_name!r} (Ray submission {plan.submission_id}).",
        "# Generated from the launch plan; `python train.py ... cluster=slurm dry_run=true` prints it.",
        "# Secrets (W&B and SGLang keys) come from the environment sbatch was called with, never this file.",
    ]
    lines += [f"#SBATCH {d}" for d in sbatch_directives(c, alloc, output=output)]
    lines += ["", "set -u"]
    if s["setup"]:
        lines += ["", "# slurm.setup"] + [str(x) for x in s["setup"]]
    lines += [
        "",
        f"PYTHON={_q(python)}",
        f"PLAN={_q(plan_file)}",
        "# Ray's own output goes here, next to this job's output.",
        f"LOG_DIR={_q(os.path.dirname(output) or '.')}",
        f"NODES={alloc.nodes}",
        f"GPUS_PER_NODE={alloc.gpus_per_node}",
        f'RUNNER=("$PYTHON" -m {RUNNER_MODULE})',
        *([f'SUPERVISED=("$PYTHON" -m {SUPERVISED_RUNNER_MODULE})'] if supervised(c) else []),
        'RAY=("$PYTHON" -m ray.scripts.scripts)',
        "# Every process of this job carries the marker: teardown finds Ray job drivers by it",
        "# (Ray starts them in sessions of their own).",
        'export CLAWGYM_HEAD_ID="slurm-${SLURM_JOB_ID}-${RANDOM}${RANDOM}"',
        "unset RAY_ADDRESS",
        "# The plan's head environment (Ray's health-check tuning).",
    ]
    lines += [f"export {k}={_q(v)}" for k, v in plan.ray_start_env.items()]
    lines += [
        "",
        'runner_pid=""',
        'head_pid=""',
        'workers_pid=""',
        "",
        "teardown() {",
        "  trap '' TERM INT",
        "  local began=$SECONDS",
        '  if [ -n "$runner_pid" ]; then',
        "    # The runner stops the Ray job (a few seconds at most), then exits.",
        '    kill -TERM "$runner_pid" 2>/dev/null',
        '    for _ in 1 2 3 4 5 6 7 8 9 10 11 12; do kill -0 "$runner_pid" 2>/dev/null || break; sleep 0.5; done',
        "  fi",
        "  # `ray start --block` ignores SIGTERM for about a minute once its GCS is gone: kill the process group.",
        '  [ -n "$head_pid" ] && { kill -KILL -- "-$head_pid"; wait "$head_pid"; } 2>/dev/null',
        "  # srun forwards TERM to every worker task, which kills its own Ray process group.",
        '  [ -n "$workers_pid" ] && kill -TERM "$workers_pid" 2>/dev/null',
        "  # Whatever still carries this job's marker on this node (e.g. job drivers in their own sessions),",
        "  # before SLURM's SIGKILL of this shell KillWait seconds after its SIGTERM.",
        '  "${RUNNER[@]}" reap',
        "  # Ray's sockets and session logs of this job on this node, once nothing writes there any more;",
        "  # bounded (an rm seen still running 25 s after scancel on a loaded CI machine), so that this",
        "  # shell ends before SLURM's SIGKILL and leaves no process behind.",
        '  [ -n "${TEMP_DIR:-}" ] && { timeout -k 1 5 rm -rf "$TEMP_DIR" || echo "[clawgym] could not remove $TEMP_DIR" >&2; }',
        '  [ -n "$workers_pid" ] && wait "$workers_pid" 2>/dev/null',
        '  echo "[clawgym] teardown done in $((SECONDS - began)) s" >&2',
        "  return 0",
        "}",
        "",
        "on_signal() {",
        f'  echo "[clawgym] $1 received ({"scancel, a requeue or the time limit" if supervised(c) else "scancel or time limit"}):'
        ' stopping the Ray job and every Ray process of this job" >&2',
        "  teardown",
        "  exit 143",
        "}",
        "trap 'on_signal SIGTERM' TERM",
        "trap 'on_signal SIGINT' INT",
        *([
            "",
            "on_lead() {",
            "  # SLURM's --signal lead (sbatch --signal=B:USR1@N): the time limit is near (or, with",
            "  # slurm.conf's preempt_send_user_signal, a preemption). The runner records the attempt's end,",
            "  # stops the Ray job and requeues this job within restart.max_attempts; SLURM then TERMs this shell.",
            '  echo "[clawgym] SIGUSR1 received (SLURM\'s --signal lead): handing it to the supervisor" >&2',
            "  # Noted first: a lead before the runner took USR1 (it starts with USR1 ignored) is read from here.",
            '  : >"$LEAD_FILE"',
            '  [ -n "$runner_pid" ] && kill -USR1 "$runner_pid" 2>/dev/null',
            "  return 0",
            "}",
            "# This allocation's note of the lead (SLURM_RESTART_COUNT: sbatch(1), set once the job was requeued).",
            'LEAD_FILE="$LOG_DIR/usr1-$SLURM_JOB_ID-${SLURM_RESTART_COUNT:-0}"',
            "trap 'on_lead' USR1",
        ] if supervised(c) else []),
        "",
        "# Preflight inside the allocation: the GPUs SLURM granted and free per-job ports on this node.",
        "# It prints HEAD_IP, NODE_GPUS, GCS_PORT, DASHBOARD_PORT, CLIENT_PORT, AGENT_PORT and TEMP_DIR.",
        'settings=$("${RUNNER[@]}" preflight "$PLAN" --nodes "$NODES" --gpus-per-node "$GPUS_PER_NODE"'
        + (f" --head-ip {_q(head_ip)}" if head_ip else "") + ") || exit 2",
        'eval "$settings"',
        "",
        "# Ray head on the first node (this one), in a process group of its own.",
        'setsid "${RAY[@]}" start --head --block --disable-usage-stats --node-ip-address="$HEAD_IP" \\',
        '  --port="$GCS_PORT" --num-gpus="$NODE_GPUS" --dashboard-host=127.0.0.1 --dashboard-port="$DASHBOARD_PORT" \\',
        '  --ray-client-server-port="$CLIENT_PORT" --dashboard-agent-listen-port="$AGENT_PORT" \\',
        '  --min-worker-port=0 --max-worker-port=0 --temp-dir="$TEMP_DIR" >"$LOG_DIR/ray-head-$SLURM_JOB_ID.log" 2>&1 &',
        "head_pid=$!",
    ]
    if alloc.nodes > 1:
        lines += [
            "",
            "# One Ray worker per other node.",
            'srun --nodes=$((NODES - 1)) --ntasks=$((NODES - 1)) --ntasks-per-node=1 --exclude="$SLURMD_NODENAME" \\',
            '  --kill-on-bad-exit=0 --output="$LOG_DIR/ray-worker-%j-%N.log" \\',
            '  "${RUNNER[@]}" worker "$HEAD_IP:$GCS_PORT" --gpus-per-node "$GPUS_PER_NODE" &',
            "workers_pid=$!",
        ]
    step = '"${SUPERVISED[@]}" run' if supervised(c) else '"${RUNNER[@]}" run'
    run = [f'{step} "$PLAN" --address "http://127.0.0.1:$DASHBOARD_PORT" --nodes "$NODES"',
           '--gpus "$((NODES * GPUS_PER_NODE))" --head-ip "$HEAD_IP" --head-pid "$head_pid"',
           f"--wait-nodes {int(s['wait_nodes_s'])}"]
    if snapshot:
        run.append(f"--snapshot {_q(snapshot)}")
    if supervised(c):
        # Where slurmstepd writes why an allocation ended (read on a requeued start).
        run.append(f"--slurm-output {_q(output)}")
        run.append('--lead-file "$LEAD_FILE"')
        lines += [
            "",
            "# Supervised (restart.enabled): the runner follows the run to its end in this allocation,",
            "# restarting a crashed trainer from its last complete checkpoint, and requeues this job",
            "# (scontrol requeue) when SLURM's USR1 says the time limit is near. It starts with USR1 ignored",
            "# (USR1's default action ends a process): a lead before it took the signal is in $LEAD_FILE.",
            "( trap '' USR1; exec " + " \\\n  ".join(run) + " ) &",
            "runner_pid=$!",
            "# wait returns early (status > 128) when a trapped signal arrives: wait again while it runs.",
            'wait "$runner_pid"',
            "rc=$?",
            'while [ "$rc" -gt 128 ] && kill -0 "$runner_pid" 2>/dev/null; do wait "$runner_pid"; rc=$?; done',
        ]
    else:
        lines += [
            "",
            "# Wait for every node's GPUs, submit the plan as a Ray job, follow it; its status is ours.",
            " \\\n  ".join(run) + " &",
            "runner_pid=$!",
            'wait "$runner_pid"',
            "rc=$?",
        ]
    lines += [
        'runner_pid=""',
        "teardown",
        'exit "$rc"',
        "",
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------- login node

def _slurm_cmd(name: str) -> str:
    exe = shutil.which(name)
    if exe is None:
        raise SlurmError(f"'{name}' is not on PATH: cluster=slurm runs on a SLURM login node\n"
                         f"  fix: run on a machine with SLURM's client commands, or choose another cluster= option")
    return exe


def parse_scontrol(text: str) -> Dict[str, str]:
    """``Key=Value`` pairs of ``scontrol show job -o`` (one line)."""
    out: Dict[str, str] = {}
    for token in text.split():
        key, sep, value = token.partition("=")
        if sep and key not in out:
            out[key] = value
    return out


class SlurmJob:
    """One submitted SLURM batch job, seen from the login node."""

    def __init__(self, job_id: str, *, output: Optional[str] = None, run_name: str = "",
                 submission_id: str = ""):
        self.job_id = job_id
        # sbatch's output file (the batch script's and the Ray job's output).
        self.output = output
        self.run_name = run_name
        # Ray submission id of the plan inside the allocation.
        self.submission_id = submission_id

    def info(self) -> Dict[str, str]:
        """scontrol's record of the job ({} once SLURM has forgotten it)."""
        try:
            res = subprocess.run([_slurm_cmd("scontrol"), "show", "job", "-o", self.job_id], capture_output=True,
                                 text=True, timeout=30)
        except subprocess.TimeoutExpired:
            return {}
        if res.returncode == 0:
            return parse_scontrol(res.stdout)
        if "Invalid job id" not in res.stderr:
            return {}  # the controller did not answer
        # Purged from the controller (MinJobAge after it ended): accounting may still know.
        exe = shutil.which("sacct")
        if exe:
            acct = subprocess.run([exe, "-j", self.job_id, "-X", "-n", "-P", "-o", "State,ExitCode"],
                                  capture_output=True, text=True, timeout=30).stdout.splitlines()
            if acct and "|" in acct[0]:
                state, code = acct[0].split("|", 1)
                # e.g. "CANCELLED by 0|0:15"
                return {"JobState": state.split()[0] if state.strip() else "FAILED", "ExitCode": code.strip()}
        return {"JobState": "FAILED", "ExitCode": "1:0", "Reason": "SLURM_no_longer_knows_the_job"}

    def state(self) -> str:
        """SLURM job state (PENDING, RUNNING, COMPLETED, ...), or UNKNOWN."""
        state = self.info().get("JobState", "")
        return state or "UNKNOWN"

    def exit_code(self, info: Optional[Dict[str, str]] = None) -> int:
        """Exit status as clawgym reports it: 0 completed, 130 cancelled, else the script's status (or 1)."""
        info = self.info() if info is None else info
        state = info.get("JobState", "UNKNOWN")
        if state == "COMPLETED":
            return 0
        if state == "CANCELLED":
            return EXIT_STOPPED
        code, _, _sig = info.get("ExitCode", "1:0").partition(":")
        try:
            return int(code) or 1
        except ValueError:
            return 1

    def cancel(self) -> None:
        subprocess.run([_slurm_cmd("scancel"), self.job_id], capture_output=True, text=True, timeout=30)

    def follow(self, *, echo: bool = True, poll: float = 1.0, stop_on_interrupt: bool = True,
               lost_contact_after: float = 300.0) -> int:
        """Print the job's output as it grows until the job ends; Ctrl-C cancels it (``scancel``).

        When SLURM's controller does not answer for ``lost_contact_after`` seconds, gives up
        (exit 1) saying how to check the job; the job itself is not touched.
        """
        seen = 0
        cancelled = False
        last_contact = time.time()

        def drain() -> None:
            nonlocal seen
            if not self.output or not os.path.exists(self.output):
                return
            with open(self.output, "r", encoding="utf-8", errors="replace") as fh:
                fh.seek(seen)
                text = fh.read()
            seen += len(text.encode("utf-8"))
            if text and echo:
                sys.stdout.write(text)
                sys.stdout.flush()

        info: Dict[str, str] = {}
        ran = False
        while True:
            try:
                drain()
                info = self.info()
                state = info.get("JobState", "UNKNOWN")
                if not info:
                    if time.time() - last_contact > lost_contact_after:
                        print(f"[clawgym] SLURM does not answer about job {self.job_id} (scontrol) for "
                              f"{lost_contact_after:.0f}s; it may still run: squeue -j {self.job_id}; output: "
                              f"{self.output}", file=sys.stderr, flush=True)
                        return 1
                    time.sleep(poll)
                    continue
                last_contact = time.time()
                if state == "PENDING" and ran:
                    # Requeued (by the supervisor at the time limit's lead, a preemption, a node failure):
                    # every allocation appends to the same output (--open-mode=append), followed on.
                    ran = False
                    print(f"[clawgym] SLURM requeued job {self.job_id} (restart {info.get('Restarts', '?')}); "
                          f"following its next allocation", flush=True)
                elif state in ("RUNNING", "COMPLETING"):
                    ran = True
                if state in TERMINAL_STATES:
                    # The batch shell may still be flushing: a last read.
                    time.sleep(0.2)
                    drain()
                    break
                time.sleep(poll)
            except KeyboardInterrupt:
                if not stop_on_interrupt:
                    print(f"\n[clawgym] stopped following; SLURM job {self.job_id} keeps running", file=sys.stderr,
                          flush=True)
                    return EXIT_STOPPED
                if cancelled:
                    continue
                cancelled = True
                print(f"\n[clawgym] interrupted: cancelling SLURM job {self.job_id} (scancel) ...", file=sys.stderr,
                      flush=True)
                self.cancel()
        rc = self.exit_code(info) if info else 1
        state = info.get("JobState", "UNKNOWN")
        if rc == 0:
            print(f"[clawgym] SLURM job {self.job_id} completed", flush=True)
        else:
            print(f"[clawgym] SLURM job {self.job_id} {state.lower()} (exit {rc})"
                  + (f"; output: {self.output}" if self.output else ""), file=sys.stderr, flush=True)
        return rc


def sbatch_env(plan: LaunchPlan, environ: Mapping[str, str]) -> Dict[str, str]:
    """The environment sbatch runs with: the launcher's, plus the plan's secrets under their job names.

    SLURM's default ``--export=ALL`` hands it to the batch job; the values appear in no
    file clawgym writes and on no command line.
    """
    from clawgym.launch.rayjob import resolve_secrets

    env = {k: v for k, v in environ.items() if k != "RAY_ADDRESS"}
    env.update(resolve_secrets(plan, environ))
    return env


def sbatch_reason(res: "subprocess.CompletedProcess") -> str:
    """sbatch's own words for a refusal, one line ("sbatch: error: " prefixes dropped)."""
    text = (res.stderr or "").strip() or (res.stdout or "").strip() or f"exit status {res.returncode}"
    lines = [ln.strip().removeprefix("sbatch: error: ").strip() for ln in text.splitlines() if ln.strip()]
    return "; ".join(dict.fromkeys(lines))


def submit(script: Path, plan: LaunchPlan, *, environ: Mapping[str, str], output: str) -> SlurmJob:
    """``sbatch --parsable <script>``; returns the job."""
    # --export=ALL on the command line: a site's SBATCH_EXPORT=NONE would otherwise keep the secrets out.
    res = subprocess.run([_slurm_cmd("sbatch"), "--parsable", "--export=ALL", str(script)], capture_output=True,
                         text=True,
                         env=sbatch_env(plan, environ), timeout=120)
    if res.returncode != 0:
        from clawgym.backends import BackendRefused

        raise BackendRefused(f"sbatch refused the batch job of {plan.run_name}", sbatch_reason(res),
                             [f"  script: {script}",
                              "  fix:  check slurm.* (partition, account, qos, time, gres, nodes, gpus_per_node) "
                              "against `sinfo` and your association"])
    job_id = res.stdout.strip().split(";")[0]
    job = SlurmJob(job_id, output=output.replace("%j", job_id), run_name=plan.run_name,
                   submission_id=plan.submission_id)
    record_job(job, script=str(script), save_dir=str(plan.save_dir or ""))
    return job


def job_dir(snapshot: str) -> Path:
    """Where the batch script and SLURM's output of a launch live: next to its snapshot."""
    snap = Path(snapshot)
    return snap.parent.parent / "slurm" / snap.name


def write_script(plan: LaunchPlan, c: Mapping[str, Any], snapshot: str) -> tuple:
    """Write the batch script next to the snapshot; returns (script path, output pattern)."""
    from clawgym.common.fsutil import atomic_write_text
    from clawgym.snapshot.layout import PLAN_FILE

    directory = job_dir(snapshot)
    directory.mkdir(parents=True, exist_ok=True)
    output = str(directory / "slurm-%j.out")
    text = batch_script(plan, c, plan_file=str(Path(snapshot) / PLAN_FILE), output=output,
                        python=interpreter(c), snapshot=snapshot)
    script = directory / SCRIPT_FILE
    atomic_write_text(script, text)
    script.chmod(0o755)
    return script, output


def interpreter(c: Mapping[str, Any]) -> str:
    """The Python that runs clawgym in the allocation: slurm.python, else this one."""
    return str(c["slurm"]["python"] or sys.executable)


# ---------------------------------------------------------------- records (clawgym jobs slurm)

def records_dir() -> Path:
    from clawgym.backends.head.records import state_dir

    return state_dir() / "slurm"


def record_job(job: SlurmJob, *, script: str, save_dir: str = "") -> None:
    """The ownership record of a batch job clawgym submitted: ``clawgym jobs slurm`` lists it and
    ``clawgym jobs stop slurm:<id>`` cancels only a job recorded here, on the cluster recorded (SLURM's
    job ids repeat across clusters and controller resets)."""
    import json

    from clawgym.common.fsutil import atomic_write_text
    from clawgym.common.ownership import slurm_cluster

    records_dir().mkdir(parents=True, exist_ok=True)
    atomic_write_text(records_dir() / f"{job.job_id}-{job.submission_id}.json", json.dumps(
        {"job_id": job.job_id, "run_name": job.run_name, "submission_id": job.submission_id, "script": script,
         "output": job.output, "save_dir": save_dir, "submitted": time.time(), **slurm_cluster()},
        indent=2) + "\n")


def list_records() -> List[Dict[str, Any]]:
    import json

    out = []
    for path in sorted(records_dir().glob("*.json")) if records_dir().is_dir() else []:
        try:
            out.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return sorted(out, key=lambda r: r.get("submitted", 0))


def recorded_job(job_id: str) -> Optional[Dict[str, Any]]:
    """clawgym's record of SLURM job ``job_id`` (the newest, when ids repeated), or None."""
    mine = [r for r in list_records() if str(r.get("job_id")) == str(job_id)]
    return mine[-1] if mine else None


def close_cancelled(save_dir: str, script: str, job_id: str, info: Mapping[str, str], *,
                    why: str = "") -> Optional[str]:
    """Record a cancel that no supervisor could record: SLURM job ``job_id`` ended CANCELLED while its
    run's record in ``<save>/clawgym/attempts.json`` is still open (the job was pending between two
    allocations, requeued after its time-limit lead, a preemption or a lost head, so no supervisor ran
    to see the scancel). The open attempt (or the resume the last one promised) becomes a stop by the
    user; the line said, or None when there was nothing to close.

    Only this job's part of the record is touched: ``supervision.json`` beside the batch script names
    the job and its first attempt (written by its first allocation; absent: no allocation of it ran).
    Nothing is closed while SLURM still has the job (any state but CANCELLED)."""
    import json

    from clawgym.snapshot.attempts import USER_STOPPED, read_attempts
    from clawgym.snapshot.checkpoints import read_tracker

    if info.get("JobState") != "CANCELLED" or not save_dir:
        return None
    try:
        sup = json.loads((Path(script).parent / SUPERVISION_FILE).read_text())
    except (OSError, ValueError):
        return None
    if str(sup.get("job_id")) != str(job_id):
        return None
    record = read_attempts(save_dir)
    first = int(sup.get("first_attempt") or 0)
    if record.stopped is not None or len(record.attempts) <= first:
        return None
    last = record.attempts[-1]
    if last.ended is not None and last.next != "resume":
        return None
    restarts = info.get("Restarts", "?")
    if last.ended is None:
        # An allocation cut before its supervisor could record the end (SLURM's SIGKILL after KillWait, or a
        # requeue by SLURM whose next allocation never started).
        evidence = (f"SLURM job {job_id} CANCELLED (Restarts={restarts}) before its supervisor recorded this "
                    f"attempt's end: " + (why or "scancel"))
    else:
        evidence = (f"SLURM job {job_id} CANCELLED between two allocations (requeued, Restarts={restarts}): "
                    + (why or "scancel while it was pending"))
    if last.ended is None:
        record.end(USER_STOPPED, evidence, read_tracker(save_dir), "stop")
    else:
        # Its resume never came: what came next is the stop.
        last.next = "stop"
    record.stop("user", evidence, f"clawgym resume {save_dir}")
    return evidence


# ---------------------------------------------------------------- the pipeline's backend

#: SLURM state -> the Ray job status the pipeline understands.
_RAY_STATUS = {"COMPLETED": "SUCCEEDED", "CANCELLED": "STOPPED"}


class SlurmHandle:
    """A submitted batch job, as the pipeline sees a job: status, follow, stop."""

    def __init__(self, job: SlurmJob, plan: LaunchPlan):
        self.job = job
        self.plan = plan
        # What the pipeline shows and records: SLURM's id (squeue/scancel take it).
        self.submission_id = f"slurm:{job.job_id}"
        # The batch job's output (the Ray job's output is in it, and in plan.log_file).
        self.log_file = job.output
        self._info: Dict[str, str] = {}
        # The cluster it was submitted to (job ids repeat across clusters and controller resets).
        from clawgym.common.ownership import slurm_cluster

        self.cluster = slurm_cluster()

    def job_record(self) -> Dict[str, Any]:
        """Where the job runs, for submitted.json and the launch's ownership record."""
        return {"kind": "slurm", "job_id": self.job.job_id, **self.cluster}

    def status(self) -> str:
        """PENDING/RUNNING while SLURM has it, then SUCCEEDED, STOPPED (cancelled) or FAILED;
        UNKNOWN while scontrol does not answer."""
        self._info = self.job.info()
        state = self._info.get("JobState", "UNKNOWN")
        if state in TERMINAL_STATES:
            return _RAY_STATUS.get(state, "FAILED")
        return state

    def message(self) -> str:
        if not self._info:
            return ""
        return f"SLURM job {self.job.job_id} {self._info.get('JobState', '?')}, exit code " \
               f"{self._info.get('ExitCode', '?')}"

    def follow(self, *, echo: bool = True, lost_contact_after: float = 300.0, stop_on_interrupt: bool = True,
               log_mode: str = "a", say: Any = None, handed_over: Any = None) -> int:
        # handed_over: the Ray handles' way to end while a supervisor beside the launch has the job in hand;
        # a SLURM run's supervisor lives in its allocation and the launcher follows the job itself.
        if echo:
            return self.job.follow(stop_on_interrupt=stop_on_interrupt, lost_contact_after=lost_contact_after)
        # A sweep: report SLURM's state changes (a queued job waits for GPUs as PENDING).
        last = ""
        last_contact = time.time()
        while True:
            st = self.status()
            if not self._info:
                # scontrol did not answer: SLURM's controller is busy or gone.
                if time.time() - last_contact > lost_contact_after:
                    return 1
                time.sleep(2.0)
                continue
            last_contact = time.time()
            state = self._info.get("JobState", "UNKNOWN")
            if state != last and say is not None:
                reason = self._info.get("Reason", "")
                say(f"SLURM job {self.job.job_id} {state.lower()}"
                    + (f" ({reason})" if state == "PENDING" and reason not in ("", "None") else ""))
            last = state
            if st in ("SUCCEEDED", "STOPPED", "FAILED"):
                return self.job.exit_code(self._info) if self._info else 1
            time.sleep(2.0)

    def stop(self, *, timeout: float = 60.0) -> str:
        """``scancel``, then wait until SLURM reports the job ended (its teardown stops Ray)."""
        self.job.cancel()
        deadline = time.time() + timeout
        st = self.status()
        while st not in ("SUCCEEDED", "STOPPED", "FAILED") and time.time() < deadline:
            time.sleep(0.5)
            st = self.status()
        return st

    def note_in_log(self, text: str) -> None:
        if self.plan.log_file:
            try:
                with open(self.plan.log_file, "a", encoding="utf-8") as fh:
                    fh.write(text + "\n")
            except OSError:
                pass


class SlurmBackend(ClusterPerJobBackend):
    """``cluster=slurm``: each job is a SLURM batch job; SLURM queues them (no packing here).

    Nothing runs on the login node but sbatch, scontrol and scancel: preflight checks what
    the shared filesystem shows (sandbox, checkpoint, checkout), the allocation checks its
    GPUs and ports itself, and there is nothing to clean up here afterwards (a cancelled or
    finished batch job has stopped its own Ray processes).
    """

    name = "slurm"
    # Each batch job starts a Ray cluster of its own in its allocation.
    packs_jobs = False

    def __init__(self, plans: Sequence[LaunchPlan], cfgs: Sequence[Any]) -> None:
        self.plans = list(plans)
        self.cfgs = list(cfgs)
        # For the pipeline's messages.
        self.address = "SLURM"

    def dry_run_artefact(self, plan: LaunchPlan, c: Mapping[str, Any], where: Path) -> Optional[tuple]:
        """The batch script as sbatch would get it, with the plan and output next to ``where``."""
        from clawgym.snapshot.layout import PLAN_FILE

        return SCRIPT_FILE, batch_script(plan, c, plan_file=str(where / PLAN_FILE),
                                         output=str(where / "slurm-%j.out"), python=interpreter(c))

    def checks_this_machine(self) -> bool:
        return False

    def settle(self, secrets: Mapping[str, str]) -> None:
        from clawgym.backends import BackendError

        try:
            _slurm_cmd("sbatch")
        except SlurmError as err:
            raise BackendError(str(err)) from None

    def submit(self, plan: LaunchPlan, cfg: Any, snapshot: Optional[str], secrets: Mapping[str, str]) -> SlurmHandle:
        from clawgym.backends import BackendError
        from clawgym.config.compose import to_plain

        c = to_plain(cfg) if hasattr(cfg, "_metadata") else cfg
        if not snapshot:
            raise BackendError("cluster=slurm needs the launch snapshot (the allocation reads the plan from it)")
        try:
            script, output = write_script(plan, c, snapshot)
            job = submit(script, plan, environ=os.environ, output=output)
        except SlurmError as err:
            from clawgym.launch.rayjob import LaunchError

            raise LaunchError(str(err)) from None
        sys.stdout.write(f"[clawgym] submitted SLURM job {job.job_id} ({plan.run_name}); batch script {script}\n"
                         f"[clawgym] output: {job.output}\n")
        sys.stdout.flush()
        return SlurmHandle(job, plan)

    def hints(self, handles: Sequence[Any]) -> List[str]:
        lines = []
        for h in handles:
            jid = h.job.job_id
            lines += [f"  status:  squeue -j {jid}   (or: clawgym jobs slurm)",
                      f"  output:  tail -f {h.job.output}",
                      f"  cancel:  scancel {jid}"]
        return lines

    def close(self, *, keep: bool, reason: str = "", ignore_jobs: Sequence[str] = ()) -> None:
        """Nothing to clean up on the login node: each batch job stops its own Ray processes."""
