"""The supervisor inside a SLURM allocation (``cluster=slurm`` with ``restart.enabled``, the default).

The batch script (clawgym/backends/slurm.py) runs this instead of ``clawgym.backends.slurm_run run``:

    python -m clawgym.supervisor.slurm_runner run PLAN --address URL --nodes N --gpus G --head-ip IP
        [--head-pid PID] [--wait-nodes S] [--snapshot DIR] [--slurm-output PATTERN]

It waits for the allocation's Ray cluster, submits the plan as a Ray job and follows the run to its
end with the supervisor's loop (:func:`clawgym.supervisor.loop.supervise`) through
:class:`SlurmAllocationRunner`, so it lives exactly as long as the allocation, where the job is:

- a trainer that dies inside the allocation (CUDA OOM, NCCL timeout, a crash) is resubmitted to the
  same in-allocation Ray head with ``--load`` at the last complete checkpoint (the tracker), within
  ``restart.max_attempts`` and the progress guard; a deterministic startup failure never is;
- SLURM's ``--signal=B:USR1@<slurm.signal_delay_s>`` lead (sbatch(1): "When a job is within
  sig_time seconds of its end time, send it the signal") ends the attempt cleanly as a time limit
  (or a preemption, when more than the lead is left: slurm.conf(5) ``preempt_send_user_signal``),
  stops the Ray job and requeues this batch job (``scontrol requeue``, scontrol(1)) when the budget
  allows; slime saves nothing on a signal (run-supervision.md section 3), so what the next
  allocation resumes is the last periodic save;
- a SIGTERM is SLURM's own requeue when scontrol's ``Restarts`` is past this allocation's
  ``SLURM_RESTART_COUNT`` (a preemption, a node failure, ``scontrol requeue``: the next allocation goes
  on), else slurmstepd's line in the job's output names it: ``CANCELLED AT <time> ***`` alone is a
  user's ``scancel`` (stopped for good, never requeued), ``... DUE TO <cause>`` the class;
- a lost Ray head (the allocation's own) is ``node-lost``: the job is requeued, as at the lead;
- the lead or a TERM before the run's first submission in this allocation (its Ray cluster still coming
  up) is an attempt with no submission, requeued within the budget like any other; the batch shell
  starts this process with USR1 ignored (its default action ends a process) and notes a lead that came
  before the handler in ``--lead-file``;
- after a CUDA OOM the moved layout (clawgym/supervisor/oom.py) runs in this allocation when its plan
  (``clawgym resume <save> <move> --dry-run --plan-out``) fits it: the same nodes and GPUs per node, save
  dir, files written at launch and servers; else the layout stays and the resume command is said;
- a user's stop recorded by ``clawgym jobs stop slurm:<id>`` (``user_stopped.json`` naming this job) makes
  SLURM's TERM that stop, whatever SLURM's state says;
- on a requeued start (``SLURM_RESTART_COUNT`` > 0, sbatch(1)) it closes the attempt the previous
  allocation could not record (its class from slurmstepd's ``CANCELLED AT ... DUE TO ...`` line in the
  job's output), and resumes from the last complete checkpoint only: with no tracker it refuses
  (slime would start over from --ref-load at rollout 0).

Every attempt goes into ``<save>/clawgym/attempts.json`` as for every backend; the budget counts the
attempts of this SLURM job across its allocations (``supervision.json`` beside the batch script).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

from clawgym.backends import slurm_run
from clawgym.backends.slurm import SUPERVISION_FILE, parse_scontrol
from clawgym.common.exit_codes import DONE, FAILED, INTERRUPTED, REFUSED
from clawgym.supervisor import classes as C
from clawgym.supervisor.classify import Evidence, match_line
from clawgym.supervisor.ray_runner import RayJobRunner
from clawgym.supervisor.recovery import RESUME, decide
from clawgym.supervisor.resume_point import ResumePoint, resume_point
from clawgym.snapshot.attempts import read_attempts
from clawgym.snapshot.checkpoints import read_tracker

#: Seconds the runner gives the Ray job to stop once the allocation ends (the batch script's
#: teardown waits 6 s for the runner before it kills Ray).
QUICK_STOP_S = 3.0
#: sbatch(1): "the signal may be sent up to 60 seconds earlier than specified".
SIGNAL_RESOLUTION_S = 60


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def with_load(entrypoint: List[str], save: str) -> List[str]:
    """The trainer's argv with ``--load`` at the save dir (replacing any ``--load``): the resume
    ``clawgym resume`` does (checkpoint.load = the save dir), Megatron reading its tracker there."""
    out = list(entrypoint)
    for i, arg in enumerate(out):
        if arg == "--load" and i + 1 < len(out):
            out[i + 1] = save
            return out
        if arg.startswith("--load="):
            out[i] = f"--load={save}"
            return out
    return out + ["--load", save]


def scontrol_job(job_id: str) -> Dict[str, str]:
    """``scontrol show job -o`` of this job ({} when scontrol does not answer)."""
    exe = shutil.which("scontrol")
    if not exe or not job_id:
        return {}
    try:
        res = subprocess.run([exe, "show", "job", "-o", job_id], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return parse_scontrol(res.stdout) if res.returncode == 0 else {}


def _seconds(text: str) -> Optional[int]:
    """SLURM's durations ("[days-]hours:minutes:seconds", "minutes:seconds") in seconds."""
    m = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)", text or "")
    if not m:
        return None
    d, h, mi, s = (int(x) if x else 0 for x in m.groups())
    return ((d * 24 + h) * 60 + mi) * 60 + s


class AllocationEnds(Exception):
    """The allocation ends (SLURM's lead or its TERM, a lost head): the next attempt runs in the next
    allocation. ``failure``: why the job could not be requeued (None: it was)."""

    def __init__(self, failure: Optional[str]):
        super().__init__(failure or "requeued")
        self.failure = failure


def fits_allocation(current: Any, moved: Any, alloc: Mapping[str, Any], nodes: int, gpus_per_node: int) -> Optional[str]:
    """None when the plan of a moved layout can run in this allocation, else why not: the same nodes and GPUs
    per node (what the batch job was granted), the same save dir, and the same files written at launch and
    servers (those were written and started for the launch's plan; another set needs a new launch)."""
    want = (int(alloc.get("nodes") or 0), int(alloc.get("gpus_per_node") or 0))
    if want != (nodes, gpus_per_node):
        return (f"needs {want[0]} node(s) x {want[1]} GPU(s) and this allocation is {nodes} node(s) x "
                f"{gpus_per_node} GPU(s)")
    if str(moved.save_dir) != str(current.save_dir):
        return f"saves to {moved.save_dir}, not {current.save_dir}"
    if dict(moved.files or {}) != dict(current.files or {}):
        return "changes the files written at launch (" + ", ".join(
            sorted(set(moved.files or {}) ^ set(current.files or {}) or
                   [k for k in moved.files if moved.files.get(k) != (current.files or {}).get(k)])) + ")"
    if list(moved.services or []) != list(current.services or []):
        return "changes the servers started in the job (services.*)"
    return None


def for_allocation(plan: Any, address: str, head_ip: str) -> Any:
    """The plan as it runs in this allocation: its Ray address, and the master address of torch's
    rendezvous at this allocation's head (the launch planned it before SLURM picked the nodes)."""
    env = dict(plan.runtime_env.get("env_vars", {}))
    if "MASTER_ADDR" in env:
        env["MASTER_ADDR"] = head_ip
        env["no_proxy"] = ",".join(dict.fromkeys(["127.0.0.1", str(head_ip)]))
    return replace(plan, runtime_env={**plan.runtime_env, "env_vars": env}, address=address)


class EndsBeforeSubmission(Exception):
    """SLURM's lead or its TERM (or a lost head) came before the run's first submission in this allocation."""


class SlurmAllocationRunner(RayJobRunner):
    """The loop's Runner inside a SLURM allocation: Ray jobs on the allocation's own head, and the
    allocation's end (SLURM's USR1 lead, its TERM) turned into the attempt's evidence."""

    def __init__(self, address: str, plan: Any, secrets: Mapping[str, str], *, job_id: str, restart_count: int,
                 lead_s: int, head_pid: Optional[int] = None, output: Optional[str] = None, head_ip: str = "",
                 nodes: int = 1, gpus_per_node: int = 0):
        super().__init__(address, self._submit_plan, backend="slurm", last_rollout=self._last_rollout_saved,
                         lost_contact_s=60.0)
        self.plan = plan
        self.secrets = dict(secrets)
        self.job_id = job_id
        self.restart_count = restart_count
        self.lead_s = lead_s
        self.head_pid = head_pid
        # This allocation: its head's address for torch's rendezvous, and what SLURM granted.
        self.head_ip = head_ip
        self.nodes = nodes
        self.gpus_per_node = gpus_per_node
        self.ending: Optional[str] = None  # "lead" (USR1), "term" (SIGTERM) or "head" (the head is gone)
        self.wake = threading.Event()
        self._stopped: set = set()
        self._followers: Dict[str, threading.Thread] = {}
        self._number = 0
        self._term: Optional[tuple] = None
        # The job's output file (slurmstepd writes why it ends there), and where this allocation's part begins.
        self.output = output
        try:
            self._output_start = os.path.getsize(output) if output else 0
        except OSError:
            self._output_start = 0

    # -- signals (installed by cmd_run; they only set flags: the loop acts at its next poll)
    def on_signal(self, signum: int, frame: Any) -> None:
        if self.ending is None:
            self.ending = "lead" if signum == signal.SIGUSR1 else "term"
        self.wake.set()

    def sleep(self, seconds: float) -> None:
        self.wake.wait(seconds)

    # -- submitting
    def submit_first(self, resume: Optional[ResumePoint]) -> str:
        if self.ending is not None:
            # The allocation ends before the run was submitted: cmd_run records it (nothing to stop).
            raise EndsBeforeSubmission(self.ending)
        return self._submit_plan(resume)

    def _submit_plan(self, resume: Optional[ResumePoint]) -> str:
        if self.ending is None and not slurm_run.head_alive(self.head_pid):
            # The allocation's Ray head is gone (a lost node, a killed head): no restart can run here.
            self.ending = "head"
        if self.ending is not None:
            self._end_allocation(resume)
        from clawgym.launch import rayjob as L

        self._number += 1
        plan = self.plan
        sid = plan.submission_id if self.restart_count == 0 and self._number == 1 else \
            f"{plan.submission_id}-r{self.restart_count}a{self._number}"
        entry = plan.entrypoint if resume is None or resume.iteration is None else \
            with_load(plan.entrypoint, str(plan.save_dir))
        if resume is not None and resume.overrides:
            moved, why = self.moved_plan(resume.overrides)
            if moved is not None:
                # The layout after an OOM runs here: the resume's own plan (as `clawgym resume` with the
                # move would submit it), on this allocation's head; later restarts here keep it.
                plan = self.plan = moved
                entry = with_load(plan.entrypoint, str(plan.save_dir))
                _say(f"[clawgym] the next attempt runs with {' '.join(resume.overrides)} in this SLURM allocation "
                     f"({why})")
            else:
                # Said, not hidden; the same OOM at the same iteration again stops the run with the memory
                # plan's advice (the recovery table's guard).
                _say(f"[clawgym] inside this SLURM allocation the next attempt keeps the launch's layout: "
                     f"{' '.join(resume.overrides)} {why}; it needs a new batch job: clawgym resume "
                     f"{plan.save_dir} {' '.join(resume.overrides)}")
        plan = replace(plan, entrypoint=entry, submission_id=sid)
        if resume is not None and resume.iteration is not None:
            _say(f"[clawgym] submitting {sid} with --load {plan.save_dir} (resumes after {resume.name})")
        handle = slurm_run.submit_when_ready(self.address, plan, self.secrets, timeout=120.0, head_pid=self.head_pid)
        self._handles[sid] = handle
        # The job's output goes to this allocation's output (the launcher follows that file).
        t = threading.Thread(target=handle.follow, kwargs={"echo": True, "stop_on_interrupt": False},
                             daemon=True, name=f"clawgym-follow-{sid}")
        t.start()
        self._followers[sid] = t
        return sid

    def moved_plan(self, overrides: tuple) -> tuple:
        """(the plan of the resume with ``overrides``, fitted to this allocation; or None, and why not).

        The plan is built the way the Ray supervisor's restart builds it: ``clawgym resume <save>
        <overrides> --dry-run`` (validation and the memory plan included), run as a program (the face:
        this layer does not import it), which writes the plan and the allocation its config asks for."""
        import tempfile

        save = str(self.plan.save_dir)
        with tempfile.TemporaryDirectory(prefix="clawgym-move-") as tmp:
            out = os.path.join(tmp, "moved.json")
            res = subprocess.run([sys.executable, "-m", "clawgym", "resume", save, *overrides, "--dry-run",
                                  "--plan-out", out], capture_output=True, text=True, timeout=300,
                                 stdin=subprocess.DEVNULL)
            try:
                data = json.loads(Path(out).read_text())
            except (OSError, ValueError):
                tail = (res.stderr or res.stdout).strip().splitlines()[-1:] or [f"exit status {res.returncode}"]
                return None, f"cannot be planned here (clawgym resume --dry-run: {tail[0]})"
        from clawgym.plan.build import LaunchPlan

        moved = LaunchPlan.from_dict(data["plan"])
        why = fits_allocation(self.plan, moved, data.get("allocation") or {}, self.nodes, self.gpus_per_node)
        if why is not None:
            return None, why
        moved = for_allocation(moved, self.address, self.head_ip)
        return replace(moved, submission_id=self.plan.submission_id, log_file=self.plan.log_file), \
            f"the same {self.nodes} node(s) x {self.gpus_per_node} GPU(s)"

    def _end_allocation(self, resume: Optional[ResumePoint]) -> None:
        """The loop chose to resume but this allocation ends: requeue the batch job (unless SLURM
        already is requeuing it), and leave the next attempt to the next allocation."""
        info = scontrol_job(self.job_id)
        restarts = int(info.get("Restarts", "0") or 0) if info.get("Restarts", "0").isdigit() else 0
        if restarts > self.restart_count:
            _say(f"[clawgym] SLURM is requeuing job {self.job_id}: the next allocation resumes from "
                 f"{resume.name if resume else 'the last complete checkpoint'}")
        else:
            res = subprocess.run([shutil.which("scontrol") or "scontrol", "requeue", self.job_id],
                                 capture_output=True, text=True, timeout=30)
            if res.returncode != 0:
                why = f"scontrol requeue {self.job_id} failed: {(res.stderr or res.stdout).strip()}"
                _say(f"[clawgym] {why}\n  the run stops here; go on with: clawgym resume {self.plan.save_dir}")
                raise AllocationEnds(why)
            _say(f"[clawgym] requeued SLURM job {self.job_id} (scontrol requeue): its next allocation resumes "
                 f"from {resume.name if resume else 'the last complete checkpoint'}")
        raise AllocationEnds(None)

    # -- following
    def running(self, sub: str) -> bool:
        if self.ending is not None:
            self._quick_stop(sub)
            return False
        if not slurm_run.head_alive(self.head_pid):
            return False
        return super().running(sub)

    def _quick_stop(self, sub: str) -> None:
        if sub in self._stopped:
            return
        self._stopped.add(sub)
        try:
            self.handle(sub).stop(timeout=QUICK_STOP_S)
        except Exception:
            pass  # the head is already gone (SLURM signals every process of the job)

    def stop(self, sub: str) -> None:
        self._quick_stop(sub)

    def _last_rollout_saved(self) -> Optional[int]:
        # slime saves at its last rollout whatever the interval (should_run_periodic_action:
        # rollout_id == num_rollout - 1), so the tracker reaching it is the trainer reaching its end.
        return read_tracker(self.plan.save_dir) if self.plan.save_dir else None

    def evidence(self, sub: str) -> Evidence:
        follower = self._followers.get(sub)
        if follower is not None:
            follower.join(timeout=0.5 if self.ending else 5.0)
        try:
            ev = super().evidence(sub)
        except Exception:
            ev = Evidence(head_alive=slurm_run.head_alive(self.head_pid), last_rollout=self._last_rollout_saved())
        if self.ending == "lead":
            cls, line = self.lead_cause()
            return replace(ev, verdict_cls=cls, verdict_evidence=line, stopped_by_user=False)
        if self.ending == "term":
            cause, line = self.term_cause()
            if cause == C.STOPPED_BY_USER:
                return replace(ev, stopped_by_user=True, verdict_cls=None)
            return replace(ev, verdict_cls=cause, verdict_evidence=line, stopped_by_user=False)
        return ev

    def lead_cause(self) -> tuple:
        """(class, evidence) of SLURM's USR1 lead: a time limit, or a preemption when more than the lead
        is left (slurm.conf(5) preempt_send_user_signal)."""
        info = scontrol_job(self.job_id)
        left = None
        limit, run = _seconds(info.get("TimeLimit", "")), _seconds(info.get("RunTime", ""))
        if limit is not None and run is not None:
            left = limit - run
        preempted = left is not None and left > self.lead_s + SIGNAL_RESOLUTION_S
        cls = C.PREEMPTED if preempted else C.TIME_LIMIT
        what = (f"{left} s left of the time limit {info.get('TimeLimit')}" if left is not None
                else "the time limit is near")
        line = (f"SLURM's --signal=B:USR1@{self.lead_s} reached job {self.job_id} ({what}"
                + ("; more than the lead: a preemption (preempt_send_user_signal)" if preempted else "") + ")")
        return cls, line

    def recorded_stop(self) -> Optional[Dict[str, Any]]:
        """The user's stop of this SLURM job that ``clawgym jobs stop slurm:<id>`` recorded before its scancel
        (``user_stopped.json`` naming this job; one naming another job is an earlier launch's)."""
        from clawgym.supervisor.process import stop_requested

        stop = stop_requested(self.plan.save_dir) if self.plan.save_dir else None
        return stop if stop and str(stop.get("slurm_job")) == self.job_id else None

    def term_cause(self) -> tuple:
        """(class, evidence) of SLURM's SIGTERM, once: SLURM's own record says it is requeuing the job
        (scontrol's Restarts past this allocation's SLURM_RESTART_COUNT), or slurmstepd's line in the job's
        output says why ("CANCELLED AT <time> ***" alone is an scancel: a person; "... DUE TO TIME LIMIT /
        PREEMPTION / NODE FAILURE" names the class). Both seen on slurm-wlm 22.05.8 (during an scancel
        scontrol still reads JobState=COMPLETING, so the state alone cannot tell)."""
        if self._term is not None:
            return self._term
        stop = self.recorded_stop()
        if stop is not None:
            # The user's own record wins over what SLURM's state and output can tell.
            self._term = (C.STOPPED_BY_USER, f"{stop.get('why') or 'a user stop'}: SLURM's SIGTERM to job {self.job_id}")
            return self._term
        info = scontrol_job(self.job_id)
        restarts = info.get("Restarts", "0")
        if restarts.isdigit() and int(restarts) > self.restart_count:
            self._term = (C.PREEMPTED, f"SLURM is requeuing job {self.job_id} (scontrol show job: JobState="
                          f"{info.get('JobState')}, Restarts={restarts}): a preemption, a node failure or scontrol "
                          "requeue")
            return self._term
        line = None
        for _ in range(10):
            line = last_stepd_line(self.output, self.job_id, since=self._output_start)
            if line:
                break
            time.sleep(0.1)
        p = match_line(line) if line else None
        if p is not None and p.cls in (C.TIME_LIMIT, C.PREEMPTED, C.NODE_LOST):
            self._term = (p.cls, line)
        else:
            self._term = (C.STOPPED_BY_USER, line or f"SIGTERM from SLURM for job {self.job_id} (scancel)")
        return self._term

    def user_stopped(self, sub: str) -> bool:
        return self.ending == "term" and self.term_cause()[0] == C.STOPPED_BY_USER


def last_stepd_line(output: Optional[str], job_id: str, since: int = 0) -> Optional[str]:
    """slurmstepd's last ``*** JOB <id> ON <node> CANCELLED AT <time> [DUE TO ...] ***`` line in the job's
    output, written past byte ``since`` (this allocation's part of the file)."""
    if not output:
        return None
    try:
        with open(output, "rb") as fh:
            fh.seek(since)
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    found = None
    for line in text.splitlines():
        if f"JOB {job_id} ON" in line and "CANCELLED AT" in line:
            found = line.strip()
    return found


# ---------------------------------------------------------------- a requeued start

def supervision_file(snapshot: Optional[str], save: str) -> Path:
    if snapshot:
        from clawgym.backends.slurm import job_dir

        return job_dir(snapshot) / SUPERVISION_FILE
    return Path(save) / "clawgym" / SUPERVISION_FILE


def first_attempt(path: Path, job_id: str, restart_count: int, now_attempts: int) -> int:
    """Index in attempts.json of this SLURM job's first attempt (the budget counts from there)."""
    try:
        data = json.loads(path.read_text())
        if restart_count > 0 and str(data.get("job_id")) == job_id:
            return int(data["first_attempt"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    from clawgym.common.fsutil import atomic_write_text

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps({"job_id": job_id, "first_attempt": now_attempts}) + "\n")
    return now_attempts


def cut_evidence(output: Optional[str], job_id: str, restart_count: int) -> tuple:
    """(class, evidence) of an attempt whose allocation ended before it could record its end: slurmstepd's
    last ``CANCELLED AT ... DUE TO ...`` line in the job's output, else "requeued"."""
    line = last_stepd_line(output, job_id)
    p = match_line(line) if line else None
    if p is not None and p.cls in (C.TIME_LIMIT, C.PREEMPTED, C.NODE_LOST):
        return p.cls, line
    return C.PREEMPTED, (f"SLURM requeued job {job_id} (SLURM_RESTART_COUNT={restart_count}) before the attempt "
                         "could record its end (a preemption, a node failure or scontrol requeue)")


def _load_config(snapshot: Optional[str]) -> Dict[str, Any]:
    import yaml

    from clawgym.snapshot.layout import RESOLVED_FILE

    if not snapshot:
        return {}
    try:
        return yaml.safe_load((Path(snapshot) / RESOLVED_FILE).read_text()) or {}
    except (OSError, yaml.YAMLError):
        return {}


def prepare_requeued(save: str, config: Mapping[str, Any], *, job_id: str, restart_count: int, first: int,
                     output: Optional[str]) -> tuple:
    """On a requeued start: close the attempt the last allocation left open, and decide whether to go
    on. Returns (exit status or None to go on, the resume point)."""
    record = read_attempts(save)
    restart = config.get("restart") or {}
    max_attempts = int(restart.get("max_attempts", 3))
    point = resume_point(save)
    if record.stopped and record.stopped.get("by") == "user":
        _say(f"[clawgym] SLURM requeued job {job_id}, but the run was stopped by the user: not resumed")
        return INTERRUPTED, point
    from clawgym.supervisor.process import stop_requested

    stop = stop_requested(save)
    if stop and str(stop.get("slurm_job")) == job_id:
        # `clawgym jobs stop slurm:<id>` while the job was pending, its scancel racing this start.
        line = f"{stop.get('why') or 'a user stop'} while SLURM job {job_id} was between two allocations"
        last = record.last
        if last is not None and last.ended is None:
            record.end(C.STOPPED_BY_USER, line, point.iteration, "stop")
        elif last is not None and last.next == RESUME:
            last.next = "stop"
        record.stop("user", line, f"clawgym resume {save}")
        _say(f"[clawgym] SLURM started job {job_id} again, but the run was stopped by the user: not resumed")
        return INTERRUPTED, point
    last = record.last
    if last is not None and last.ended is None:
        cls, line = cut_evidence(output, job_id, restart_count)
        ours = record.attempts[first:]
        d = decide(ours, cls, "slurm", max_attempts, point.iteration, enabled=True)
        record.end(cls, line, point.iteration, d.action)
        title = C.CLASSES[cls].title
        if d.action != RESUME:
            record.stop("supervisor", d.why, d.fix)
            _say(f"[clawgym] attempt {len(ours)}: {title} (evidence: {line}); stopped for good: {d.why}"
                 + (f"\n  fix: {d.fix}" if d.fix else ""))
            return FAILED, point
        _say(f"[clawgym] attempt {len(ours)} of {max_attempts + 1}: {title} (evidence: {line}); "
             f"resuming from {point.name}")
    elif last is not None and last.next not in (None, RESUME):
        _say(f"[clawgym] SLURM requeued job {job_id}, but its run ended ({last.next}): nothing to resume")
        return (DONE if last.next == "done" else FAILED), point
    if point.iteration is None and never_submitted(read_attempts(save).attempts[first:]):
        # No allocation of this job got as far as submitting the run (SLURM's lead came first): no trainer
        # of it ran, nothing can be lost, and the run starts as its launch would have.
        _say(f"[clawgym] no allocation of SLURM job {job_id} submitted the run yet: starting it")
        return None, point
    if point.iteration is None:
        # Never a silent start over: slime would train again from --ref-load at rollout 0.
        why = f"refusing to restart the run from scratch: {point.problem}"
        record = read_attempts(save)
        record.stop("supervisor", why, point.fix)
        _say(f"[clawgym] {why}\n  fix: {point.fix}")
        return REFUSED, point
    note = point.incomplete_note()
    if note:
        _say(f"[clawgym] {note}")
    return None, point


def never_submitted(attempts: List[Any]) -> bool:
    """True when the job's attempts (one or more) all ended before the run was submitted."""
    return bool(attempts) and all(a.submission_id is None for a in attempts)


def ends_before_submission(save: str, config: Mapping[str, Any], runner: SlurmAllocationRunner,
                           resume: Optional[ResumePoint], first: int) -> int:
    """The allocation ends before its run was submitted (SLURM's USR1 lead while the Ray cluster came up,
    or its TERM, or the head died): an attempt with no submission, recorded like any other, then the
    job is requeued within the budget (its next allocation resumes from the last complete checkpoint, or
    starts the run when none of its allocations submitted it yet), or its end is said and recorded."""
    record = read_attempts(save)
    record.start(None, resumed_from=resume.iteration if resume is not None else None)
    ours = record.attempts[first:]
    point = resume_point(save)
    restart = config.get("restart") or {}
    max_attempts = int(restart.get("max_attempts", 3))
    if runner.ending == "term":
        cls, line = runner.term_cause()
    elif runner.ending == "lead":
        cls, line = runner.lead_cause()
    else:
        cls, line = C.NODE_LOST, f"the Ray head of SLURM job {runner.job_id} exited before the run was submitted"
    line += " (before the run was submitted in this allocation)"
    fresh = point.iteration is None and never_submitted(ours)
    if fresh and cls != C.STOPPED_BY_USER and len(ours) - 1 < max_attempts:
        d_action, why, fix = RESUME, "", None
    else:
        d = decide(ours, cls, "slurm", max_attempts, point.iteration, enabled=True)
        d_action, why, fix = d.action, d.why, d.fix
    record.end(cls, line, point.iteration, d_action)
    title = C.CLASSES[cls].title
    head = f"[clawgym] attempt {len(ours)} of {max_attempts + 1}: {title} (evidence: {line})"
    if d_action != RESUME:
        by = "user" if cls == C.STOPPED_BY_USER else "supervisor"
        record.stop(by, why, fix)
        _say(f"{head}; stopped for good: {why}" + (f"\n  fix: {fix}" if fix else ""))
        return INTERRUPTED if by == "user" else FAILED
    _say(f"{head}; " + ("the run was not submitted yet: its next allocation starts it" if fresh
                        else f"resuming from {point.name} in the next allocation"))
    try:
        runner._end_allocation(point if point.iteration is not None else None)
    except AllocationEnds as ends:
        return _allocation_ended(save, ends)
    return FAILED


def _allocation_ended(save: str, ends: "AllocationEnds") -> int:
    """The exit status of an allocation that ended (requeued: DONE), its failure recorded as the stop."""
    if ends.failure is None:
        return DONE
    read_attempts(save).stop("supervisor", ends.failure, f"clawgym resume {save}")
    return FAILED


# ---------------------------------------------------------------- the batch script's step

def cmd_run(args: argparse.Namespace) -> int:
    from clawgym.launch import rayjob as L
    from clawgym.supervisor.loop import supervise

    plan = for_allocation(slurm_run.load_plan(args.plan), args.address, args.head_ip)
    secrets = L.resolve_secrets(plan, os.environ)
    config = _load_config(args.snapshot)
    job_id = os.environ.get("SLURM_JOB_ID", "")
    count = os.environ.get("SLURM_RESTART_COUNT", "0")
    restart_count = int(count) if count.isdigit() else 0
    save = str(plan.save_dir)
    output = (args.slurm_output or "").replace("%j", job_id) or None
    runner = SlurmAllocationRunner(args.address, plan, secrets, job_id=job_id, restart_count=restart_count,
                                   lead_s=int(((config.get("slurm") or {}).get("signal_delay_s")) or 120),
                                   head_pid=args.head_pid, output=output, head_ip=args.head_ip,
                                   nodes=args.nodes, gpus_per_node=args.gpus // max(1, args.nodes))
    signal.signal(signal.SIGUSR1, runner.on_signal)
    signal.signal(signal.SIGTERM, runner.on_signal)
    if args.lead_file and os.path.exists(args.lead_file):
        # SLURM's lead reached the batch shell before this handler was installed (the shell keeps USR1
        # ignored for this process until then, and notes the lead in this file): it counts the same.
        runner.on_signal(signal.SIGUSR1, None)
    first = first_attempt(supervision_file(args.snapshot, save), job_id, restart_count,
                          len(read_attempts(save).attempts))
    resume: Optional[ResumePoint] = None
    if restart_count > 0:
        _say(f"[clawgym] SLURM job {job_id} restarted (SLURM_RESTART_COUNT={restart_count}): "
             "resuming from the last complete checkpoint")
        rc, resume = prepare_requeued(save, config, job_id=job_id, restart_count=restart_count, first=first,
                                      output=output)
        if rc is not None:
            return rc
    watcher = None
    try:
        try:
            slurm_run.wait_for_nodes(args.address, args.nodes, args.gpus, args.wait_nodes, head_pid=args.head_pid,
                                     until=lambda: runner.ending is not None)
            sub = runner.submit_first(resume)
        except (EndsBeforeSubmission, slurm_run.HeadGone):
            if runner.ending is None:
                raise
            return ends_before_submission(save, config, runner, resume, first)
        if args.snapshot:
            from clawgym.snapshot.checkpoints import start_checkpoint_watcher

            watcher = start_checkpoint_watcher(plan, args.snapshot)
        return supervise(save, config, runner, sub, say=_say, sleep=runner.sleep,
                         resumed_from=resume.iteration if resume is not None else None, first_attempt=first)
    except AllocationEnds as ends:
        return _allocation_ended(save, ends)
    except L.LaunchError as err:
        print(f"[clawgym] {err}", file=sys.stderr, flush=True)
        return FAILED
    except slurm_run.HeadGone:
        print("[clawgym] the Ray head of this job exited before the job was submitted; its output is in "
              "ray-head-<SLURM job id>.log next to this file", file=sys.stderr, flush=True)
        return FAILED
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        if watcher is not None:
            watcher.stop()


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m clawgym.supervisor.slurm_runner", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    sp = slurm_run.add_run_arguments(sub.add_parser("run"))
    sp.add_argument("--slurm-output", help="sbatch's --output pattern (%%j: the job id)")
    sp.add_argument("--lead-file", help="where the batch shell notes SLURM's USR1 lead that came before this "
                                        "process could take it")
    sp.set_defaults(func=cmd_run)
    args = p.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
