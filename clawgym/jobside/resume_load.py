"""Start the trainer from the last complete checkpoint of its save dir (a KubeRay RayJob's entrypoint).

Usage (the RayJob's ``spec.entrypoint`` when ``restart.enabled``; clawgym/backends/kuberay.py)::

    python3 resume_load.py --save SAVE_DIR --starts STARTS_FILE -- python3 train.py FLAGS...

KubeRay retries a failed RayJob up to ``spec.backoffLimit`` times, each retry on a new RayCluster with
the same entrypoint (KubeRay's RayJobSpec: "Specifies the number of retries before marking this job
failed. Each retry creates a new RayCluster."). So the entrypoint itself must resume:

- Megatron writes ``latest_checkpointed_iteration.txt`` in the save dir after a save completes; when
  it names an ``iter_*`` dir that is there, the trainer gets ``--load SAVE_DIR`` (replacing any
  ``--load``) and Megatron loads that iteration; an ``iter_*`` newer than the tracker is a save cut
  short: named, never loaded.
- slime, finding no tracker under ``--load``, silently starts over from ``--ref-load`` at rollout 0
  (run-supervision.md, section 2). On a retry (STARTS_FILE, on the shared volume, already lists an
  earlier start) with no complete checkpoint this refuses to start, exit 1, saying why: a retry that
  would train from scratch into the run's save dir is never run.
- the first start of a run passes the trainer's flags through unchanged.

- a deterministic startup failure (argparse, a startup check, a checkpoint that cannot load: the
  same config fails the same way) is never retried. KubeRay retries every failed RayJob alike, so
  the shim runs the trainer as its child, keeps the end of its output, and when a line there shows
  one of the supervisor's startup-failure patterns (``startup_patterns.json`` beside this file,
  generated from clawgym/supervisor/classes.py) it writes STARTS_FILE + ``.stopped``; each later
  retry of this RayJob reads it and refuses at once, exit 1, naming the line, so no retry spends the
  allocation's GPU time failing the same way.

Each start appends one line to STARTS_FILE (start time, the iteration it resumed from). The exit
status is the trainer's (128 + N for a signal N), 1 when it refuses, and 1 for a startup failure
the trainer exits 0 from (Megatron's ``sys.exit()`` on a checkpoint it cannot load).

Standard library only: clawgym copies this file and its pattern file into ``<save>/clawgym/`` on the
shared volume and the job's Python runs it.
"""

import collections
import json
import os
import re
import signal
import subprocess
import sys
import time

TRACKER_FILE = "latest_checkpointed_iteration.txt"
#: Exit status of a refusal: clawgym's "the job failed" (clawgym/common/exit_codes.py FAILED).
REFUSED_EXIT = 1
#: The supervisor's startup-failure patterns, beside this file (tools/gen_reference.py writes it).
PATTERNS_FILE = "startup_patterns.json"
#: Lines of the trainer's output kept for the patterns (the supervisor reads as many: ray_runner.TAIL_LINES).
TAIL_LINES = 400


def _iteration_dirs(save):
    out = {}
    try:
        names = os.listdir(save)
    except OSError:
        return out
    for name in names:
        if name.startswith("iter_") and name[5:].isdigit() and os.path.isdir(os.path.join(save, name)):
            out[int(name[5:])] = name
    return out


def last_complete(save):
    """(iteration or None, [incomplete iterations], problem or None) of a save dir."""
    iters = _iteration_dirs(save)
    try:
        with open(os.path.join(save, TRACKER_FILE)) as fh:
            text = fh.read().strip()
    except OSError:
        return None, sorted(iters), "no %s in %s" % (TRACKER_FILE, save)
    if not text.isdigit():
        return None, sorted(iters), "%s in %s reads %r, not an iteration" % (TRACKER_FILE, save, text)
    tracker = int(text)
    newer = sorted(i for i in iters if i > tracker)
    if tracker not in iters:
        return None, newer, "%s names iteration %d, but iter_%07d/ is not in %s" % (TRACKER_FILE, tracker, tracker, save)
    return tracker, newer, None


def with_load(argv, save):
    out = list(argv)
    for i, arg in enumerate(out):
        if arg == "--load" and i + 1 < len(out):
            out[i + 1] = save
            return out
        if arg.startswith("--load="):
            out[i] = "--load=" + save
            return out
    return out + ["--load", save]


def _starts(path):
    try:
        with open(path) as fh:
            return [ln for ln in fh.read().splitlines() if ln.strip()]
    except OSError:
        return []


def _say(text):
    sys.stdout.write("[clawgym] " + text + "\n")
    sys.stdout.flush()


def main(argv):
    if "--" not in argv:
        sys.stderr.write("usage: resume_load.py --save SAVE_DIR --starts STARTS_FILE -- TRAINER ARGV...\n")
        return 2
    cut = argv.index("--")
    opts, trainer = argv[:cut], argv[cut + 1:]
    save = opts[opts.index("--save") + 1] if "--save" in opts else None
    starts_file = opts[opts.index("--starts") + 1] if "--starts" in opts else None
    if not save or not starts_file or not trainer:
        sys.stderr.write("usage: resume_load.py --save SAVE_DIR --starts STARTS_FILE -- TRAINER ARGV...\n")
        return 2
    earlier = _starts(starts_file)
    iteration, incomplete, problem = last_complete(save)
    if incomplete:
        _say("%s in %s %s newer than %s: a save cut short, not loaded" % (
            ", ".join("iter_%07d" % i for i in incomplete), save, "is" if len(incomplete) == 1 else "are",
            TRACKER_FILE))
    number = len(earlier) + 1
    stopped = _read_json(starts_file + ".stopped")
    if stopped:
        _say("attempt %d of this RayJob (a KubeRay retry): not run: attempt %s failed at startup, and the same "
             "config fails the same way: %s (%s)\n"
             "  fix: change what that line names, then launch it again (KubeRay retries every failed RayJob; "
             "its remaining retries refuse at once)" % (number, stopped.get("attempt"), stopped.get("line"),
                                                         stopped.get("program")))
        _record(starts_file, number, None, refused="startup failure of attempt %s" % stopped.get("attempt"))
        return REFUSED_EXIT
    if iteration is None and earlier:
        _say("attempt %d of this RayJob (a KubeRay retry): refusing to start the run from scratch: %s; slime would "
             "quietly start over from --ref-load at rollout 0, not resume\n"
             "  fix: lower checkpoint.save_interval so the run saves before it dies, then launch it again "
             "(or clawgym resume %s once it has a complete checkpoint)" % (number, problem, save))
        _record(starts_file, number, None, refused=problem)
        return REFUSED_EXIT
    if iteration is not None:
        trainer = with_load(trainer, save)
        _say("attempt %d of this RayJob: resuming from iter_%07d (%s), --load %s" % (number, iteration, TRACKER_FILE,
                                                                                   save))
    else:
        _say("attempt %d of this RayJob: a fresh start (no complete checkpoint in %s yet)" % (number, save))
    _record(starts_file, number, iteration)
    sys.stdout.flush()
    code, tail = _run(trainer)
    hit = _startup_failure(tail, _patterns())
    if hit is not None:
        line, pattern = hit
        _say("attempt %d failed at startup: %s (%s: %s); a KubeRay retry would fail the same way, so this "
             "RayJob's retries refuse at once" % (number, line, pattern["program"], pattern["source"]))
        _write_json(starts_file + ".stopped", {"attempt": number, "line": line, "program": pattern["program"],
                                               "source": pattern["source"], "exit_code": code})
        return code or REFUSED_EXIT
    return code


def _run(trainer):
    """Run the trainer as a child, its output passed through line by line; (exit status, last lines)."""
    tail = collections.deque(maxlen=TAIL_LINES)
    try:
        child = subprocess.Popen(trainer, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except OSError as exc:
        _say("could not start the trainer %s: %s" % (trainer[0], exc))
        return REFUSED_EXIT, []

    def forward(signum, frame):
        # Ray stops a job with SIGTERM (then SIGKILL): the trainer gets it as if it were the entrypoint.
        try:
            child.send_signal(signum)
        except OSError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    out = getattr(sys.stdout, "buffer", sys.stdout)
    for raw in iter(child.stdout.readline, b""):
        out.write(raw)
        out.flush()
        tail.append(raw.decode("utf-8", "replace").rstrip("\r\n"))
    code = child.wait()
    return (128 - code if code < 0 else code), list(tail)


def _patterns():
    data = _read_json(os.path.join(os.path.dirname(os.path.abspath(__file__)), PATTERNS_FILE))
    out = []
    for p in (data or {}).get("patterns", []):
        try:
            out.append(dict(p, compiled=re.compile(p["regex"])))
        except (re.error, KeyError, TypeError):
            continue  # a pattern this Python cannot read is skipped: the retry is then KubeRay's
    return out


def _startup_failure(lines, patterns):
    """(the first line showing a startup failure, its pattern), or None."""
    for line in lines:
        for p in patterns:
            if p["compiled"].search(line):
                return line.strip()[:300], p
    return None


def _read_json(path):
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def _write_json(path, data):
    try:
        tmp = path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(data, fh)
        os.replace(tmp, path)
    except OSError as exc:
        _say("could not record the startup failure in %s: %s" % (path, exc))


def _record(path, number, iteration, refused=None):
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "a") as fh:
            fh.write(json.dumps({"attempt": number, "started": time.time(), "resumed_from": iteration,
                                 "refused": refused}) + "\n")
    except OSError as exc:
        _say("could not record this start in %s: %s" % (path, exc))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
