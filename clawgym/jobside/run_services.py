"""Run servers beside the trainer inside the Ray job, then the trainer; stop them with it.

Usage (the plan's job entrypoint when ``services.*`` is on)::

    python3 run_services.py SPEC.json -- python3 train.py FLAGS...

SPEC.json (written by clawgym into ``<paths.save>/clawgym/`` at launch) lists each
service: ``name``, ``argv``, ``env`` (added to the job's), ``health_url`` (polled until it
answers 200), ``timeout_s``, ``log`` (its output). Each service is started in its own
process group before the trainer and health-checked; the trainer then runs; when it exits,
or this process is sent SIGTERM/SIGINT (a stopped Ray job), every service this process
started, and only those, is stopped: SIGTERM to its group, SIGKILL after a grace period.
The exit status is the trainer's (1 when a service never became healthy, when something
else already listened on its address before it started, or when it exited while the
trainer ran: every service is watched for the trainer's whole life).

Standard library only: this file is copied next to SPEC.json and run by the job's Python.
"""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

GRACE_S = 30.0
#: Seconds between looks at the services while the trainer runs.
WATCH_S = 2.0


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _listening(url: str) -> bool:
    """Something accepts connections at the url's host and port (before we started anything there)."""
    import socket
    from urllib.parse import urlparse

    u = urlparse(url)
    if not u.hostname or not u.port:
        return False
    try:
        with socket.create_connection((u.hostname, u.port), timeout=2):
            return True
    except OSError:
        return False


def _stop_trainer(trainer, signum=signal.SIGTERM) -> None:
    if trainer is not None and trainer.poll() is None:
        trainer.send_signal(signum)
        try:
            trainer.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            trainer.kill()
            trainer.wait()


def _stop(procs: list) -> None:
    for _, proc in procs:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + GRACE_S
    for _, proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()


def main(argv: list) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: run_services.py SPEC.json -- COMMAND...", file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as fh:
        spec = json.load(fh)
    command = argv[2:]
    procs: list = []
    stopping = {"signal": None}

    def on_signal(signum, frame):  # noqa: ARG001
        stopping["signal"] = signum
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    trainer = None
    try:
        for svc in spec.get("services", []):
            if _listening(svc["health_url"]):
                # Someone else's server: its health check would pass for ours, and the trainer
                # would talk to it.
                print(f"[clawgym services] {svc['name']}: something already listens at {svc['health_url']} "
                      f"before {svc['name']} was started; refusing to take it for {svc['name']} (free the port "
                      f"or set services.{svc['name']}.port to a free one)", flush=True)
                return 1
            env = {**os.environ, **{str(k): str(v) for k, v in (svc.get("env") or {}).items()}}
            log_path = svc.get("log")
            if log_path:
                os.makedirs(os.path.dirname(log_path), exist_ok=True)
            out = open(log_path, "ab") if log_path else None
            print(f"[clawgym services] starting {svc['name']}: {' '.join(svc['argv'])}", flush=True)
            proc = subprocess.Popen(svc["argv"], env=env, stdout=out or None, stderr=subprocess.STDOUT if out else None,
                                    start_new_session=True)
            procs.append((svc["name"], proc))
            deadline = time.monotonic() + float(svc.get("timeout_s") or 1800)
            while True:
                # Ours first: a server that died cannot be the one answering.
                if proc.poll() is not None:
                    print(f"[clawgym services] {svc['name']} exited with status {proc.returncode} before it "
                          f"answered {svc['health_url']}" + (f"; see {log_path}" if log_path else ""), flush=True)
                    return 1
                if _healthy(svc["health_url"]) and proc.poll() is None:
                    break
                if time.monotonic() > deadline:
                    print(f"[clawgym services] {svc['name']} did not answer {svc['health_url']} within "
                          f"{svc.get('timeout_s')} s", flush=True)
                    return 1
                time.sleep(2)
            print(f"[clawgym services] {svc['name']} is up at {svc['health_url']}", flush=True)
        trainer = subprocess.Popen(command)
        # Every service is watched for the trainer's whole life: one that dies fails the job.
        while True:
            try:
                return trainer.wait(timeout=WATCH_S)
            except subprocess.TimeoutExpired:
                pass
            dead = [(name, proc) for name, proc in procs if proc.poll() is not None]
            if dead:
                name, proc = dead[0]
                print(f"[clawgym services] {name} exited with status {proc.returncode} while the trainer ran; "
                      f"stopping the trainer (the job fails)", flush=True)
                _stop_trainer(trainer)
                return 1
    except KeyboardInterrupt:
        _stop_trainer(trainer, stopping["signal"] or signal.SIGTERM)
        return 128 + int(stopping["signal"] or signal.SIGINT)
    finally:
        _stop(procs)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
