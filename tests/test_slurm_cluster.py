"""``cluster=slurm`` on a real one-node SLURM cluster (tests/fixtures/slurm_cluster.py).

Each launch starts a real Ray head inside a real allocation and runs the recording
stand-in trainer there, so the tests are few and each checks several things:

- a sweep of two 8-GPU jobs on the 8-GPU node: SLURM queues the second until the first
  ends; one succeeds and one fails, each reported with its SLURM id; secrets reach the
  job but are absent from the batch script and from SLURM's job record; checkpoints are
  stamped inside the allocation;
- a single run cancelled with ``scancel`` mid-run: the launcher exits with 130 and no
  process of the job's Ray cluster is left well before SLURM's KillWait, and none at all after it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from tests.fixtures.checkout import LAUNCH_SKIPS, checkout_overrides
from tests.fixtures.slurm_cluster import KILL_WAIT

ROOT = Path(__file__).resolve().parent.parent
SECRETS = {"SGLANG_API_KEY": "sglang-secret-in-slurm-7781", "WANDB_API_KEY": "wandb-secret-in-slurm-9932"}
#: The sweep: 2 jobs x 8 GPUs on an 8-GPU node (they cannot run at once).
SWEEP_TIMEOUT = 600


@pytest.fixture()
def env(slurm_cluster, tmp_path) -> Dict[str, str]:
    e = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "WANDB_KEY", *SECRETS)}
    e.update(slurm_cluster.env)
    e["CLAWGYM_STATE_DIR"] = str(tmp_path / "state")
    return e


def base(checkout: Path) -> List[str]:
    # wandb.enabled=false: the W&B key is still a secret the plan carries when set, but no
    # W&B run is attempted by anything (the stand-in trainer ignores it anyway).
    return [*checkout_overrides(checkout, skip_checks=LAUNCH_SKIPS, supervised=True), "cluster=slurm"]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:200]
    except OSError:
        return "(gone)"


def _stat(pid: int) -> Tuple[str, int, str]:
    """(state, parent pid, command name) of a live process."""
    text = Path(f"/proc/{pid}/stat").read_text()
    comm = text[text.index("(") + 1:text.rindex(")")]
    state, ppid = text[text.rindex(")") + 2:].split()[:2]
    return state, int(ppid), comm


def _teardown_step(cmd: str, job_id: str) -> bool:
    """The batch script's own teardown steps: its removal of Ray's temp dir (``timeout ... rm -rf
    /tmp/cg-slurm-<job>-...``) and ``slurm_run reap``."""
    removal = f"/tmp/cg-slurm-{job_id}-" in cmd and cmd.split(" ")[0] in ("rm", "timeout")
    return removal or cmd.rstrip().endswith("-m clawgym.backends.slurm_run reap")


def _but_the_teardown(pids: List[int], job_id: str) -> List[int]:
    """``pids`` less the teardown's own steps and the batch shell waiting on them. On a loaded machine
    they may still run (an rm on a disk that stalls, a reap whose interpreter starts slowly), inside
    SLURM's tracking: its SIGKILL of the job reaches them, as the test's second bound checks."""
    allowed = set()
    for pid in pids:
        cmd = _cmdline(pid)
        if _teardown_step(cmd, job_id):
            p = pid
            try:
                while p > 1 and len(allowed) < 64:
                    _, ppid, comm = _stat(p)
                    if comm == "slurmstepd":
                        break
                    allowed.add(p)
                    p = ppid
            except (OSError, ValueError):
                continue
    return [pid for pid in pids if pid not in allowed]


def _described(pids: List[int]) -> str:
    """Each pid with its state (D: in the kernel, e.g. waiting on the disk), kernel wait and command."""
    out = []
    for pid in pids:
        try:
            state, ppid, _ = _stat(pid)
            wchan = Path(f"/proc/{pid}/wchan").read_text()
        except (OSError, ValueError):
            state, ppid, wchan = "gone", 0, ""
        out.append(f"{pid} [{state} {wchan or '-'} ppid {ppid}] {_cmdline(pid)}")
    return "; ".join(out)


def _job_output(checkout: Path, run_name: str) -> str:
    """The tail of the job's SLURM output (the teardown's lines)."""
    outs = sorted((checkout / "exp" / run_name / "clawgym" / "slurm").glob("*/slurm-*.out"))
    return "".join(f"--- {p}\n{p.read_text(errors='replace')[-3000:]}" for p in outs)


#: What each marked process was when a scan found it (its state, flags and command), for a failure's
#: message: a process may be gone by the time the message is written.
_SEEN: Dict[int, str] = {}


def marker_processes(job_id: str) -> List[int]:
    """Pids of processes carrying this SLURM job's Ray marker (CLAWGYM_HEAD_ID=slurm-<id>-...)."""
    want = f"CLAWGYM_HEAD_ID=slurm-{job_id}-".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes()
        except OSError:
            continue
        if any(var.startswith(want) for var in env.split(b"\0")):
            found.append(int(entry.name))
            if int(entry.name) not in _SEEN:
                _SEEN[int(entry.name)] = _described([int(entry.name)])
    return found


#: /proc/<pid>/stat's flags: PF_EXITING (include/linux/sched.h), set once the process has begun to exit.
PF_EXITING = 0x4
#: SIGKILL's bit in /proc/<pid>/status's SigPnd and ShdPnd masks (signal 9: bit 8).
SIGKILL_BIT = 1 << 8


def killed(pid: int) -> bool:
    """The process was killed and the kernel is finishing it: it has begun to exit, or a SIGKILL is
    pending. It never runs its own code again; where the machine's disk stalls, it may take long to go."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
        flags = int(text[text.rindex(")") + 2:].split()[6])
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
    except (OSError, ValueError, IndexError):
        return True  # gone
    pending = 0
    for line in status:
        if line.startswith(("SigPnd:", "ShdPnd:")):
            pending |= int(line.split()[1], 16)
    return bool(flags & PF_EXITING or pending & SIGKILL_BIT)


def still_running(pids: List[int]) -> List[int]:
    """``pids`` less those killed and being finished by the kernel."""
    return [pid for pid in pids if not killed(pid)]


def test_slurm_sweep_queues_jobs_reports_each_and_keeps_secrets_out(slurm_cluster, clawgym_checkout, env, tmp_path):
    env = {**env, **SECRETS}
    exp = f"slsw{os.getpid()}"
    cmd = [sys.executable, str(ROOT / "train.py"), "-m", *base(clawgym_checkout), f"exp_name={exp}",
           "+extra_env.STANDIN_CHECKPOINTS=1", "+extra_env.STANDIN_EXIT_CODE=0,3", "wandb.enabled=true",
           # Unsupervised: each job's own exit status is the subject here (a supervised run that dies is
           # restarted in its allocation: tests/test_slurm_supervised.py).
           "restart.enabled=false",
           f"hydra.sweep.dir={tmp_path}/sweep"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: List[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    # While the first job runs, SLURM holds the second (its 8 GPUs are taken).
    seen_pending_while_running = False
    records: Dict[str, str] = {}
    deadline = time.time() + SWEEP_TIMEOUT
    while proc.poll() is None and time.time() < deadline:
        out = slurm_cluster.run("squeue", "-h", "-o", "%i %T", check=False).stdout.split()
        states = dict(zip(out[0::2], out[1::2]))
        if "RUNNING" in states.values() and "PENDING" in states.values():
            seen_pending_while_running = True
        for jid in states:
            # SLURM's job record, while SLURM holds the job (-dd: with the batch script's details).
            records[jid] = slurm_cluster.run("scontrol", "show", "job", "-dd", jid, check=False).stdout
        time.sleep(1.0)
    if proc.poll() is None:
        proc.kill()
        pytest.fail("the sweep did not finish in time:\n" + "".join(lines))
    reader.join(timeout=10)
    output = "".join(lines)
    assert proc.returncode == 1, output  # one job failed
    assert seen_pending_while_running, output
    ids = re.findall(r"submitted SLURM job (\d+)", output)
    assert len(ids) == 2, output
    # The summary names each job's SLURM id and its outcome.
    summary = output[output.rindex("submission id"):]
    assert re.search(rf"slurm:{ids[0]}\s+succeeded", summary) and re.search(rf"slurm:{ids[1]}\s+failed", summary), summary
    save = {code: clawgym_checkout / "exp" / f"{exp}_extra_env.STANDIN_EXIT_CODE={code}" for code in ("0", "3")}
    rec0 = json.loads((save["0"] / "standin_record.json").read_text())
    rec1 = json.loads((save["3"] / "standin_record.json").read_text())
    # Queued, not packed: the second job started after the first ended.
    assert rec1["start"] >= rec0["end"]
    assert rec0["exit_code"] == 0 and rec1["exit_code"] == 3
    # The job ran inside the allocation with the GPUs SLURM granted, and got the secrets.
    assert rec0["env"]["SLURM_JOB_ID"] == ids[0] and rec0["env"]["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    for name, value in SECRETS.items():
        assert rec0["env"].get(name) == value
    # Checkpoints were stamped inside the allocation.
    stamp = json.loads((save["0"] / "iter_0000001" / "clawgym_snapshot" / "stamp.json").read_text())
    assert stamp["iteration"] == 1
    # Secrets: never in the batch scripts, SLURM's job records or the launcher's output.
    scripts = list((save["0"] / "clawgym" / "slurm").glob("*/slurm_batch.sh")) + \
        list((save["3"] / "clawgym" / "slurm").glob("*/slurm_batch.sh"))
    assert len(scripts) == 2
    assert records and all(jid in records for jid in ids), records.keys()
    for value in SECRETS.values():
        for script in scripts:
            assert value not in script.read_text()
        for jid, text in records.items():
            assert value not in text, f"secret in scontrol show job {jid}"
        assert value not in output
    # `clawgym jobs slurm` lists both with SLURM's state.
    listing = subprocess.run([sys.executable, "-m", "clawgym", "jobs", "slurm"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=60).stdout
    assert re.search(rf"^{ids[0]}\s+COMPLETED", listing, re.M) and re.search(rf"^{ids[1]}\s+FAILED", listing, re.M)


def test_scancel_mid_run_leaves_no_ray_process(slurm_cluster, clawgym_checkout, env, tmp_path):
    run_name = f"slcancel{os.getpid()}"
    cmd = [sys.executable, str(ROOT / "train.py"), *base(clawgym_checkout), f"run_name={run_name}",
           "+extra_env.STANDIN_SLEEP=600", f"hydra.run.dir={tmp_path}/run"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: List[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    deadline = time.time() + 480
    while not any("[standin] step" in ln for ln in lines):
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            pytest.fail("the job did not start running:\n" + "".join(lines))
        time.sleep(0.5)
    job_id = re.search(r"submitted SLURM job (\d+)", "".join(lines)).group(1)
    assert marker_processes(job_id), "the job's Ray processes should carry its marker"
    slurm_cluster.run("scancel", job_id)
    # scancel TERMs the job's processes; SLURM SIGKILLs the ones it still tracks KILL_WAIT s later, but
    # not Ray's job drivers, which live in sessions of their own. The batch script's teardown stops
    # them (runner <= 6 s, then reap): no process of the job's Ray cluster, nor the runner, may be left
    # well before SLURM's SIGKILL; the teardown's own last steps may, and nothing at all after it.
    bound = KILL_WAIT - 5
    t0 = time.time()
    while _but_the_teardown(marker_processes(job_id), job_id) and time.time() - t0 < bound:
        time.sleep(0.25)
    left = _but_the_teardown(marker_processes(job_id), job_id)
    assert not left, (f"processes of SLURM job {job_id} still alive {bound} s after scancel: "
                      f"scancel: {_described(left)}\n{_job_output(clawgym_checkout, run_name)}")
    # The temp dir's removal (bounded, timeout -k 1 5) may still run where the disk stalls (twice on the
    # CI machine, never here): it is in the batch shell's tree, so at the latest SLURM's SIGKILL ends it.
    # A process killed but still being finished by the kernel (its exit waits on a stalled disk) runs no
    # more of its own code: it is not left running. Each one found says what it was when first seen.
    while still_running(marker_processes(job_id)) and time.time() - t0 < KILL_WAIT + 30:
        time.sleep(0.25)
    left = still_running(marker_processes(job_id))
    assert not left, (f"processes of SLURM job {job_id} running {KILL_WAIT + 30} s after scancel: {_described(left)}"
                      f"\nfirst seen as: {'; '.join(_SEEN.get(pid, '?') for pid in left)}"
                      f"\n{_job_output(clawgym_checkout, run_name)}")
    assert not subprocess.run(["pgrep", "-f", f"cg-slurm-{job_id}-"], capture_output=True).stdout
    # Ray's temp dir of the job went with it, or the job's output says it could not be removed in time.
    temp = list(Path("/tmp").glob(f"cg-slurm-{job_id}-*"))
    if temp:
        assert f"could not remove {temp[0]}" in _job_output(clawgym_checkout, run_name), temp
    try:
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(timeout=10)
    output = "".join(lines)
    assert rc == 130, output
    assert f"SLURM job {job_id} cancelled" in output


def test_missing_slurm_skips_with_reason_or_fails_when_required(monkeypatch):
    from _pytest.outcomes import Failed, Skipped

    from tests.fixtures.slurm_cluster import _unavailable

    monkeypatch.delenv("CLAWGYM_REQUIRE_SLURM", raising=False)
    with pytest.raises(Skipped, match="not installed: slurmctld"):
        _unavailable("not installed: slurmctld (slurm-wlm)")
    monkeypatch.setenv("CLAWGYM_REQUIRE_SLURM", "1")
    with pytest.raises(Failed, match="CLAWGYM_REQUIRE_SLURM=1"):
        _unavailable("not installed: slurmctld (slurm-wlm)")


def test_without_sbatch_a_slurm_launch_is_refused_before_anything_is_written(clawgym_checkout, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PATH"] = os.path.dirname(sys.executable)  # python, but no SLURM client commands
    env["CLAWGYM_STATE_DIR"] = str(tmp_path / "state")
    run_name = f"nosbatch{os.getpid()}"
    res = subprocess.run([sys.executable, str(ROOT / "train.py"), *base(clawgym_checkout), f"run_name={run_name}",
                          f"hydra.run.dir={tmp_path}/run"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode != 0
    assert "'sbatch' is not on PATH" in res.stderr and "cluster=slurm runs on a SLURM login node" in res.stderr
    assert not (clawgym_checkout / "exp" / run_name).exists()
