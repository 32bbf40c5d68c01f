"""Names and paths: run names become folder names; the save dir is a folder of its own; paths are absolute.

clawgym's own rules, not the trainer's (slime would start with any of these and lose or mix
checkpoints, or fail writing a snapshot): they stay on purpose.
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path
from typing import Any, List, Optional

from clawgym.validate.core import Collector


#: Longest file name most filesystems take, in bytes (Linux NAME_MAX).
NAME_MAX = 255


#: The widest launch timestamp clawgym puts into submission ids (``%Y%m%d_%H%M%S``).
_TIMESTAMP_WIDTH = len("20260101_000000")


#: Room for the ``.<n>`` suffix that keeps same-second snapshot names apart.
_UNIQUE_SUFFIX_WIDTH = len(".99")


#: Room for a process id in temp names.
_PID_WIDTH = 7


def longest_derived_name(run_name: str, hostname: Optional[str] = None) -> str:
    """The longest file name clawgym derives from a run name: the temp dir its launch
    snapshot is written to (``.tmp-<submission id>.<n>-<host>-<pid>``; the submission id
    is ``clawgym-<run_name>-<timestamp>``)."""
    from clawgym.plan.build import submission_id

    sid = re.sub(r"[^A-Za-z0-9_.-]+", "-", submission_id(run_name, "0" * _TIMESTAMP_WIDTH))
    host = socket.gethostname() if hostname is None else hostname
    return f".tmp-{sid}{'9' * _UNIQUE_SUFFIX_WIDTH}-{host}-{'9' * _PID_WIDTH}"


def name_problem(name: Any) -> Optional[str]:
    """Why ``name`` cannot be one folder name, or None."""
    if not isinstance(name, str) or not name:
        return "it is empty"
    if name in (".", ".."):
        return f"{name!r} names the current or parent folder, not a folder of its own"
    if "/" in name:
        return "it contains '/', which would make it several nested folders"
    if "\0" in name:
        return "it contains a NUL character, which no path can hold"
    control = next((ch for ch in name if ord(ch) < 0x20 or 0x7f <= ord(ch) < 0xa0), None)
    if control is not None:
        # ESC and friends would reach folder names and, printed, drive the terminal.
        return f"it contains the control character {control!r}, which folder names and terminals must not get"
    if name.strip() != name:
        return "it has surrounding spaces"
    return None


def rule_names(v: Collector) -> None:
    """exp_name and run_name become folder names (the save dir, snapshot dirs): one safe component each."""
    for k in ("exp_name", "run_name"):
        name = v.c[k]
        if k == "run_name" and name == v.c["exp_name"]:
            continue  # derived from exp_name: reported there
        why = name_problem(name)
        if why is not None:
            v.add("names-are-folder-names", [k],
                  f"names become folder names (the save dir <paths.root>/exp/<run_name>, snapshot dirs): "
                  f"one plain name, not '.' or '..', no '/', no NUL, no surrounding spaces; here {why}",
                  f"set {k} to a plain name, e.g. {k}=my-run")
            continue
        longest = longest_derived_name(name)
        size = len(longest.encode())
        if size > NAME_MAX:
            room = len(name.encode()) - (size - NAME_MAX)
            v.add("name-within-name-max", [k],
                  f"{k} is {len(name.encode())} bytes; the longest folder name clawgym derives from it "
                  f"(the launch snapshot's temp dir '.tmp-clawgym-<name>-<timestamp>.<n>-<host>-<pid>') "
                  f"would be {size} bytes, over the filesystem's limit of {NAME_MAX} bytes per name",
                  f"shorten {k} to at most {max(room, 1)} bytes")
    save = v.c["paths"]["save"]
    if isinstance(save, str) and save:
        long = [p for p in Path(save).parts if len(p.encode()) > NAME_MAX]
        if long:
            v.add("name-within-name-max", ["paths.save"],
                  f"a folder name in paths.save is {len(long[0].encode())} bytes, over the filesystem's limit of "
                  f"{NAME_MAX} bytes per name",
                  "shorten that part of paths.save (or run_name, when paths.save derives from it)")


def rule_paths_absolute(v: Collector) -> None:
    """Every path the job uses is absolute: the Ray job runs in a temporary working dir of Ray's
    (deleted when the head stops), so a relative save dir would lose the checkpoints there."""
    paths = v.c.get("paths") or {}
    keys = [f"paths.{k}" for k in paths] + ["checkpoint.load"]
    for key in keys:
        group, name = key.split(".")
        value = (v.c.get(group) or {}).get(name)
        if value is None or (key == "checkpoint.load"):
            if value is None or os.path.isabs(str(value)):
                continue
        if not isinstance(value, str) or not value.strip():
            v.add("paths-absolute", [key], f"{key} is empty: every path the job uses must name a folder",
                  f"set {key} to an absolute path" + (" (e.g. the ClawGym-RL checkout)" if key == "paths.root" else ""))
            continue
        if os.path.isabs(value):
            continue
        # Derived keys follow paths.root: report the source once.
        if key != "paths.root" and not os.path.isabs(str(paths.get("root") or "")):
            continue
        v.add("paths-absolute", [key],
              f"{key} is relative ({value!r}); the job runs in Ray's temporary working dir, where relative paths "
              "point (checkpoints written there are deleted with it)",
              f"set {key}={os.path.abspath(os.path.expanduser(value))}")


def rule_save_interval_needs_save(v: Collector) -> None:
    if v.c["checkpoint"]["save_interval"] is not None and not v.c["paths"]["save"]:
        v.add("save-interval-needs-save-dir", ["checkpoint.save_interval", "paths.save"],
              "a save interval needs a directory to save to",
              "set paths.save, or checkpoint.save_interval=null to save nothing")
    if v.c["checkpoint"]["save_interval"] is not None and v.c["checkpoint"]["save_interval"] <= 0:
        v.add("save-interval-positive", ["checkpoint.save_interval"], "a save interval counts rollouts and must be > 0",
              "set checkpoint.save_interval, e.g. 5, or null")
    if v.c["paths"]["save"] and v.c["checkpoint"]["save_interval"] is None:
        v.add("save-dir-needs-interval", ["paths.save", "checkpoint.save_interval"],
              "Megatron requires a save interval whenever a save dir is given",
              "set checkpoint.save_interval, or paths.save=null to save nothing")


def _real(path: str) -> Path:
    """Absolute, normalized, symlinks resolved as far as the path exists."""
    return Path(os.path.realpath(os.path.expanduser(path)))


def _run_save_dir(path: Path) -> bool:
    """True when ``path`` is the save dir of a clawgym run (it holds launch snapshots).

    A ``clawgym/snapshots/`` holding nothing but hidden leftovers (a temp dir of a launch
    killed while it wrote, a discarded snapshot) is no run's: an interrupted launch must not
    mark the folder as another run's save dir."""
    # Not from clawgym.snapshot: validation needs only the folder's name, and that package (~1000
    # lines, subprocess, threading, socket) is the largest a dry run would import for nothing.
    from clawgym.common.savedir import SNAPSHOTS_RELPATH

    try:
        return any(not e.name.startswith(".") for e in os.scandir(path / SNAPSHOTS_RELPATH))
    except OSError:
        return False


def runs_below(path: Path, *, depth: int = 3, budget: int = 2000) -> List[Path]:
    """Save dirs of other runs strictly below ``path`` (breadth-first, at most ``depth``
    levels and ``budget`` folders looked at; checkpoint and hidden folders are not entered)."""
    found: List[Path] = []
    level = [path]
    for _ in range(depth):
        nxt: List[Path] = []
        for d in level:
            try:
                entries = [e for e in os.scandir(d) if e.is_dir(follow_symlinks=False)]
            except OSError:
                continue
            for e in entries:
                if e.name.startswith(".") or e.name.startswith("iter_") or e.name == "clawgym":
                    continue
                budget -= 1
                if budget < 0:
                    return found
                child = Path(e.path)
                if _run_save_dir(child):
                    found.append(child)
                else:
                    nxt.append(child)
        level = nxt
    return found


def rule_save_dir_placement(v: Collector) -> None:
    """The save dir is a folder of its own: not the checkout, not around or inside another run's."""
    save, root = v.c["paths"]["save"], v.c["paths"]["root"]
    if not isinstance(save, str) or not save:
        return
    s = _real(save)
    if isinstance(root, str) and root:
        r = _real(root)
        if s == r or s in r.parents:
            v.add("save-dir-not-checkout", ["paths.save", "paths.root"],
                  f"the save dir resolves to {s}, {'the checkout itself' if s == r else 'a folder above the checkout'}"
                  " (paths.root): the trainer would write iter_*/, logs/ and clawgym/snapshots/ among its files",
                  "give paths.save a folder of its own, e.g. leave paths.save at <paths.root>/exp/<run_name> "
                  "with a plain run_name")
            return
    for parent in s.parents:
        if _run_save_dir(parent):
            v.add("save-dir-inside-another-run", ["paths.save"],
                  f"the save dir {s} is inside {parent}, the save dir of another run (it holds clawgym/snapshots); "
                  "its checkpoints and retention would mix with this run's",
                  "set paths.save to a folder outside other runs' save dirs (or leave it at "
                  "<paths.root>/exp/<run_name> and choose another run_name)")
            return
    if s.is_dir() and not _run_save_dir(s):
        below = runs_below(s)
        if below:
            more = f" and {len(below) - 1} more" if len(below) > 1 else ""
            v.add("save-dir-above-another-run", ["paths.save"],
                  f"the save dir {s} holds the save dir of another run ({below[0]}{more}); "
                  "this run's checkpoints, logs and snapshots would land around it",
                  "set paths.save to a folder of its own, not a parent of other runs' save dirs "
                  "(or leave it at <paths.root>/exp/<run_name>)")


#: Folders of the system that never hold a run's output, itself or anything below it.
SYSTEM_TREES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run", "/sbin",
                "/sys", "/usr")
#: Folders shared by the whole machine: a folder below them is fine, they themselves are not a save dir.
SHARED_FOLDERS = ("/", "/home", "/mnt", "/media", "/opt", "/root", "/srv", "/tmp", "/var", "/var/tmp")

#: What a run reads, by key: a save dir that is one of them or holds one writes iter_*/, logs/,
#: tensorboard/ and clawgym/ among the run's own inputs (a save dir of <root>/data/clawgym_train turned
#: the training tasks into a checkpoint folder, and the next launch's `tasks` preflight failed).
RUN_INPUTS = (("paths.train_tasks", "the training tasks"), ("paths.eval_tasks", "the eval tasks"),
              ("paths.hf_checkpoint", "the HF checkpoint"), ("paths.ref_load", "the reference model (--ref-load)"),
              ("paths.slime", "the trainer's working dir (the slime checkout)"),
              ("paths.megatron", "the Megatron-LM checkout"), ("sandbox.rootfs", "the sandbox's rootfs"),
              ("checkpoint.load", "the checkpoint it loads (--load)"))


def _system_problem(s: Path) -> Optional[str]:
    text = str(s)
    home = os.path.realpath(os.path.expanduser("~"))
    if any(text == t or text.startswith(t + "/") for t in SYSTEM_TREES):
        return "a system folder"
    if text in SHARED_FOLDERS or text == home:
        return "a folder the whole machine (or your HOME) shares"
    return None


def _inside_or_same(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _working_save(v: Collector) -> str:
    """A save dir that holds no input and is no system folder: <paths.root>/exp/<run_name>, else one under HOME."""
    run = str(v.c.get("run_name") or "run")
    root = v.c["paths"].get("root")
    candidates = [Path(os.path.realpath(str(root))) / "exp" / run] if isinstance(root, str) and root else []
    candidates.append(Path(os.path.realpath(os.path.expanduser("~"))) / "clawgym" / "exp" / run)
    for cand in candidates:
        if _system_problem(cand) is None and not _inputs_clash(v, cand):
            return str(cand)
    return str(candidates[-1])


def _inputs_clash(v: Collector, s: Path) -> List[tuple]:
    """(key, what, resolved path) of each input of the run that ``s`` is or holds."""
    out = []
    for key, what in RUN_INPUTS:
        group, name = key.split(".")
        value = (v.c.get(group) or {}).get(name)
        if not isinstance(value, str) or not value.strip() or not os.path.isabs(os.path.expanduser(value)):
            continue
        if key == "sandbox.rootfs" and (v.c.get("sandbox") or {}).get("backend") != "chroot":
            continue  # only the chroot sandbox reads it
        p = _real(value)
        if key == "checkpoint.load" and _inside_or_same(p, s):
            # Resuming loads from the run's own save dir (Megatron's --load = --save; clawgym resume).
            continue
        if _inside_or_same(p, s):
            out.append((key, what, p))
    return out


def rule_save_dir_not_an_input(v: Collector) -> None:
    """clawgym's own rule: the save dir (``--save``; the trainer writes iter_*/, the tracker file, and
    clawgym its logs/, tensorboard/ and clawgym/ snapshots there) is no input of the run and no system
    folder. The trainer would start and write among its own tasks, checkpoint or checkout."""
    save = v.c["paths"].get("save")
    if not isinstance(save, str) or not save.strip() or not os.path.isabs(os.path.expanduser(save)):
        return
    s = _real(save)
    why = _system_problem(s)
    if why is not None:
        v.add("save-dir-not-an-input", ["paths.save"],
              f"the save dir resolves to {s}, {why}: the run writes its checkpoints, logs and snapshots there",
              f"set paths.save={_working_save(v)} (or leave it at <paths.root>/exp/<run_name>)")
        return
    for key, what, p in _inputs_clash(v, s):
        v.add("save-dir-not-an-input", ["paths.save", key],
              f"the save dir {s} {'is' if p == s else 'holds'} {what} ({key}={p}): the run would write "
              "iter_*/, logs/, tensorboard/ and clawgym/ among what it reads",
              f"set paths.save={_working_save(v)} (a folder of its own, outside every input of the run)")
