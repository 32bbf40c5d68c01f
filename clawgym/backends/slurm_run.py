"""Inside a SLURM allocation: the steps of clawgym's batch script (``cluster=slurm``).

    python -m clawgym.backends.slurm_run preflight PLAN --nodes N --gpus-per-node G [--head-ip IP]
    python -m clawgym.backends.slurm_run run PLAN --address URL --nodes N --gpus G --head-ip IP [--snapshot DIR]
    python -m clawgym.backends.slurm_run worker HEAD_IP:PORT --gpus-per-node G
    python -m clawgym.backends.slurm_run reap

``preflight`` checks the GPUs SLURM granted this node and picks free per-job ports,
printing shell assignments for the script. ``run`` waits until every node has joined
Ray with its GPUs, submits the plan with clawgym's own submission code, stamps the
launch snapshot into checkpoints while following the job, and exits with the job's
status (SIGTERM stops the job first). ``worker`` runs ``ray start --block`` on another
node in a process group of its own and kills that group on SIGTERM. ``reap`` kills
every process on this node that carries the job's marker (``CLAWGYM_HEAD_ID``),
except itself and its ancestors.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Tuple

# Only what ``reap`` needs is imported here: it runs during teardown, between SLURM's SIGTERM
# and its SIGKILL KillWait seconds later, and the plan's imports (Hydra, OmegaConf) cost
# seconds of that on a loaded node. The other steps import what they use.
from clawgym.backends.head import ports as head_ports, processes as head_processes, records as head_records

if TYPE_CHECKING:
    from clawgym.plan.build import LaunchPlan

#: How long the runner gives the Ray job to stop on SIGTERM (the script waits 6 s for it).
STOP_TIMEOUT = 5.0


def _say(text: str) -> None:
    sys.stdout.write(f"[clawgym] {text}\n")
    sys.stdout.flush()


def load_plan(path: str) -> "LaunchPlan":
    from clawgym.plan.build import LaunchPlan

    return LaunchPlan.from_dict(json.loads(Path(path).read_text()))


def granted_gpus(environ=os.environ) -> int:
    """GPUs SLURM granted this job on this node (its CUDA_VISIBLE_DEVICES, set from --gres)."""
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        on_node = environ.get("SLURM_GPUS_ON_NODE")
        return int(on_node) if on_node and on_node.isdigit() else 0
    return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])


def node_ip(head_ip: Optional[str], nodes: int) -> str:
    """The head's bind address: given, loopback on one node, else this node's first address."""
    if head_ip:
        return head_ip
    if nodes <= 1:
        return "127.0.0.1"
    out = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    if not out:
        raise SystemExit("[clawgym] cannot tell this node's address (hostname -I printed nothing); "
                         "set slurm.head_ip")
    return out[0]


def _temp_dir() -> str:
    import secrets

    job = os.environ.get("SLURM_JOB_ID", str(os.getpid()))
    # Short: Ray's unix socket paths are capped at 107 bytes. Unique: job ids restart with a cluster.
    return f"/tmp/cg-slurm-{job}-{secrets.token_hex(2)}"


def head_alive(pid: Optional[int]) -> bool:
    """True while the head the batch script started runs. A head that died stays a zombie until the
    batch shell (its parent, waiting on the runner) reaps it: a zombie is dead here."""
    if not pid:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2:].split()[0] not in ("Z", "X")
    except (OSError, ValueError, IndexError):
        return True


class HeadGone(Exception):
    """The Ray head this job started has exited."""


def cmd_preflight(args) -> int:
    plan = load_plan(args.plan)
    problems: List[str] = []
    gpus = granted_gpus()
    if gpus < args.gpus_per_node:
        problems.append(f"gpus: SLURM granted {gpus} GPUs on {os.uname().nodename} (CUDA_VISIBLE_DEVICES="
                        f"{os.environ.get('CUDA_VISIBLE_DEVICES')!r}), the run needs {args.gpus_per_node} per node"
                        f"\n  fix: check slurm.gpus_per_node / slurm.gpu_type and the partition's gres")
    env = plan.runtime_env.get("env_vars", {})
    api_host, api_port = env.get("HOST", "127.0.0.1"), env.get("PORT")
    if api_port:
        from clawgym.common.net import port_free

        busy = port_free(api_host if api_host not in ("0.0.0.0", "") else "127.0.0.1", int(api_port))
        if busy:
            problems.append(f"ports: the API server port {api_host}:{api_port} (sglang.api_port) is in use on "
                            f"{os.uname().nodename}: {busy}\n  fix: choose another sglang.api_port")
    if problems:
        for p in problems:
            print(f"[clawgym] preflight in the allocation failed: {p}", file=sys.stderr, flush=True)
        return 2
    ip = node_ip(args.head_ip, args.nodes)
    ports = [head_ports.free_port() for _ in range(4)]
    print(f"HEAD_IP={ip}\nNODE_GPUS={gpus}\nGCS_PORT={ports[0]}\nDASHBOARD_PORT={ports[1]}\n"
          f"CLIENT_PORT={ports[2]}\nAGENT_PORT={ports[3]}\nTEMP_DIR={_temp_dir()}")
    sys.stderr.write(f"[clawgym] preflight in the allocation passed: {gpus} GPUs on {os.uname().nodename}, "
                     f"Ray head {ip}:{ports[0]}, dashboard 127.0.0.1:{ports[1]}\n")
    return 0


def cluster_nodes(address: str) -> Tuple[int, float]:
    """(alive nodes, GPUs they declare) of the cluster whose dashboard is at ``address``."""
    url = f"{address.rstrip('/')}/api/v0/nodes?limit=10000&detail=1"
    with urllib.request.urlopen(url, timeout=10) as resp:
        data = json.load(resp)
    nodes = [n for n in data.get("data", {}).get("result", {}).get("result", []) if n.get("state") == "ALIVE"]
    return len(nodes), float(sum((n.get("resources_total") or {}).get("GPU", 0.0) for n in nodes))


def wait_for_nodes(address: str, nodes: int, gpus: int, timeout: float, head_pid: Optional[int] = None,
                   until: Optional[Callable[[], bool]] = None) -> None:
    """Wait until the allocation's Ray cluster has every node and GPU; returns early once ``until()`` is
    true (the supervised runner: SLURM's lead or TERM came meanwhile)."""
    deadline = time.time() + timeout
    last: Tuple[int, float] = (0, 0.0)
    while True:
        if until is not None and until():
            return
        if not head_alive(head_pid):
            raise HeadGone()
        try:
            last = cluster_nodes(address)
            if last[0] >= nodes and last[1] >= gpus:
                _say(f"Ray cluster ready: {last[0]} node(s), {last[1]:g} GPUs")
                return
        except Exception:
            pass
        if time.time() > deadline:
            raise SystemExit(f"[clawgym] the Ray cluster did not reach {nodes} node(s) with {gpus} GPUs within "
                             f"{timeout:.0f}s (it has {last[0]} node(s), {last[1]:g} GPUs)\n"
                             f"  fix: check the workers' output in this file; raise slurm.wait_nodes_s")
        time.sleep(1.0)


def submit_when_ready(address: str, plan: LaunchPlan, secrets, *, timeout: float, head_pid: Optional[int] = None):
    """Submit the plan; the head lists its nodes a little before its job API takes jobs, so a
    refused connection is retried until ``timeout`` (or until the head exits)."""
    from clawgym.launch import rayjob as L

    deadline = time.time() + timeout
    while True:
        if not head_alive(head_pid):
            raise HeadGone()
        try:
            # started_here: the head this script started has the secrets in its environment (inherited
            # from sbatch's), so the job inherits them; here they are only masked in the output.
            return L.submit(address, plan, secrets=secrets, started_here=True)
        except L.LaunchError:
            if ray_head_job_exists(address, plan.submission_id):
                # An attempt got as far as registering the job: follow that one.
                return L.JobHandle(address, plan.submission_id, plan, redact=list(secrets.values()))
            if time.time() > deadline:
                raise
            time.sleep(2.0)


def ray_head_job_exists(address: str, submission_id: str) -> bool:
    """True when the cluster knows the job (an earlier attempt registered it)."""
    try:
        with urllib.request.urlopen(f"{address.rstrip('/')}/api/jobs/{submission_id}", timeout=5) as resp:
            return resp.status == 200
    except Exception:
        return False


def _quick_stop(stop):
    """``JobHandle.stop`` bounded to a few seconds, and quiet when the head is already gone
    (``scancel`` signals every process of the job at once, Ray's included)."""
    def quick(timeout: float = STOP_TIMEOUT) -> str:
        try:
            return stop(timeout=STOP_TIMEOUT)
        except Exception:
            return "STOPPED (Ray head already gone)"
    return quick


def cmd_run(args) -> int:
    from clawgym.launch import rayjob as L

    plan = load_plan(args.plan)
    env = dict(plan.runtime_env.get("env_vars", {}))
    # The trainer's rendezvous address is the head node, known only now.
    if "MASTER_ADDR" in env:
        env["MASTER_ADDR"] = args.head_ip
        env["no_proxy"] = ",".join(dict.fromkeys(["127.0.0.1", str(args.head_ip)]))
    plan.runtime_env = {**plan.runtime_env, "env_vars": env}
    plan.address = args.address
    secrets = L.resolve_secrets(plan, os.environ)
    handle = None
    watcher = None
    signal.signal(signal.SIGTERM, lambda s, f: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        wait_for_nodes(args.address, args.nodes, args.gpus, args.wait_nodes, head_pid=args.head_pid)
        handle = submit_when_ready(args.address, plan, secrets, timeout=args.wait_nodes, head_pid=args.head_pid)
        if args.snapshot:
            from clawgym.snapshot.checkpoints import start_checkpoint_watcher

            # Checkpoints are stamped here, inside the allocation, while the job runs.
            watcher = start_checkpoint_watcher(plan, args.snapshot)
        handle.stop = _quick_stop(handle.stop)  # type: ignore[assignment]
        rc = handle.follow()
    except L.LaunchError as err:
        print(f"[clawgym] {err}", file=sys.stderr, flush=True)
        rc = 1
    except HeadGone:
        print("[clawgym] the Ray head of this job exited before the job was submitted; its output is in "
              "ray-head-<SLURM job id>.log next to this file", file=sys.stderr, flush=True)
        rc = 1
    except KeyboardInterrupt:
        if handle is not None:
            _say(f"stopping Ray job {handle.submission_id}")
            _quick_stop(handle.stop)()
        rc = L.EXIT_STOPPED
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if watcher is not None:
            watcher.stop()
    return rc


def cmd_worker(args) -> int:
    gpus = granted_gpus()
    if gpus < args.gpus_per_node:
        print(f"[clawgym] {os.uname().nodename}: SLURM granted {gpus} GPUs, the run needs {args.gpus_per_node}",
              file=sys.stderr, flush=True)
        return 2
    argv = [sys.executable, "-m", "ray.scripts.scripts", "start", "--block", "--disable-usage-stats",
            f"--address={args.address}", f"--num-gpus={gpus}",
            f"--dashboard-agent-listen-port={head_ports.free_port()}", "--min-worker-port=0", "--max-worker-port=0",
            f"--temp-dir={_temp_dir()}"]
    temp_dir = argv[-1].split("=", 1)[1]
    proc = subprocess.Popen(argv, start_new_session=True)

    def stop(signum, frame):
        # The whole group at once: ray start --block ignores TERM once the head is gone.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        reap()
        shutil.rmtree(temp_dir, ignore_errors=True)
        sys.exit(143)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    return proc.wait()


#: How long ``reap`` keeps looking for marked processes (the batch script's teardown has
#: spent up to 6 s on the runner by then; SLURM's KillWait is 30 s by default).
REAP_TIMEOUT = 8.0


def _start_time(pid: str) -> str:
    """The process's start time in clock ticks (/proc/<pid>/stat field 22): with the pid, who it is."""
    with open(f"/proc/{pid}/stat", "rb") as fh:
        return fh.read().rsplit(b")", 1)[1].split()[19].decode()


def _kill_marked(marker: str, protected: set, done: Dict[Tuple[int, str], None]) -> List[int]:
    """SIGKILL each live process of this node whose environment holds the job's marker, as it
    is found (a process that forks fast gets little time to), unless it is in ``done`` (killed by an
    earlier pass: a dying process keeps its environment until its memory is gone, and killing it
    again changes nothing). Adds each one signalled to ``done``; returns their pids."""
    want = f"{head_records.MARKER_ENV}={marker}".encode()
    killed = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) in protected:
            continue
        try:
            who = (int(entry.name), _start_time(entry.name))
            if who in done:
                continue
            with open(f"/proc/{entry.name}/environ", "rb") as fh:
                # A zombie's environment reads empty: it is dead already.
                if want not in fh.read().split(b"\0"):
                    continue
            os.kill(who[0], signal.SIGKILL)
        except (OSError, IndexError):
            continue
        done[who] = None
        killed.append(who[0])
    return killed


def reap(timeout: float = REAP_TIMEOUT) -> List[int]:
    """SIGKILL every process of this node that carries this job's marker (not us, not our ancestors).

    Pass after pass until one finds no process it has not killed already: a process forked by a
    dying one (a raylet starting a worker, a driver's shell its next command) behind a pass carries
    the marker too and would otherwise outlive the job. Processes already killed are not waited for
    (SLURM's SIGKILL of the job follows KillWait seconds after its SIGTERM), so the teardown goes on
    at once instead of spending ``timeout`` on a process that takes long to die.
    """
    marker = os.environ.get(head_records.MARKER_ENV)
    if not marker:
        return []
    protected = head_processes.protected_pids()
    done: Dict[Tuple[int, str], None] = {}  # ordered, no repeats
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not _kill_marked(marker, protected, done):
            break
        time.sleep(0.05)  # let a dying process's last forks show before looking again
    return [pid for pid, _ in done]


def cmd_reap(args) -> int:
    killed = reap()
    if killed:
        _say(f"killed {len(killed)} leftover process(es) of this job on {os.uname().nodename}")
    return 0


def add_run_arguments(sp: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The ``run`` step's arguments, as the batch script passes them (shared with the supervised
    runner, clawgym/supervisor/slurm_runner.py, which the script runs instead when supervised)."""
    sp.add_argument("plan")
    sp.add_argument("--address", required=True)
    sp.add_argument("--nodes", type=int, required=True)
    sp.add_argument("--gpus", type=int, required=True)
    sp.add_argument("--head-ip", required=True)
    sp.add_argument("--wait-nodes", type=float, default=300.0)
    sp.add_argument("--snapshot")
    sp.add_argument("--head-pid", type=int, help="the head's pid: waiting ends when it exits")
    return sp


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m clawgym.backends.slurm_run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    sp = sub.add_parser("preflight")
    sp.add_argument("plan")
    sp.add_argument("--nodes", type=int, required=True)
    sp.add_argument("--gpus-per-node", type=int, required=True)
    sp.add_argument("--head-ip")
    sp.set_defaults(func=cmd_preflight)
    sp = add_run_arguments(sub.add_parser("run"))
    sp.set_defaults(func=cmd_run)
    sp = sub.add_parser("worker")
    sp.add_argument("address")
    sp.add_argument("--gpus-per-node", type=int, required=True)
    sp.set_defaults(func=cmd_worker)
    sp = sub.add_parser("reap")
    sp.set_defaults(func=cmd_reap)
    args = p.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
