"""Config snapshots: one per launch in the save dir, and a copy in every checkpoint.

Layout (``<save>`` is ``paths.save``)::

    <save>/clawgym/snapshots/<submission id>/   one per real launch, never overwritten
        config.yaml            composed config, interpolations kept
        config.resolved.yaml   the same, resolved (what the run used)
        overrides.yaml         command-line overrides (null when unknown)
        choices.yaml           chosen option of each config group (null when unknown)
        launch_plan.json       argv, runtime env (no secret), submission id
        meta.json              versions, git commits, host, time, secret *names*,
                               and the checkpoints present at launch
        manifest.json          size and sha256 of every file above; written last
        submitted.json         the submission, added once the job was submitted (a SLURM job
                               names its cluster: ClusterName and controller)
    <save>/clawgym/wandb_config.yaml            the W&B run config of the latest launch
    <save>/iter_0000009/clawgym_snapshot/       copy of the snapshot of the run that wrote it

A snapshot is written into a hidden temp dir and renamed into place, so a crash leaves
either a whole snapshot or none (hidden ``.tmp-*`` leftovers are never listed).
Its ``manifest.json`` (written last) records the size and sha256 of every file:
``show``, ``diff``, ``resume`` and ``stamp`` refuse a snapshot whose files are missing,
truncated or altered (:func:`verify_snapshot`), rather than read a partial config.

A snapshot is written before the job is submitted. The launch then calls
:func:`mark_submitted` once Ray accepted the job, or :func:`discard_unsubmitted` when
it stops before submitting (a refused cluster, Ctrl-C). A snapshot without the mark
(a launcher killed in between) is not a launch: ``show`` lists it apart, and
``resume``, ``diff``, ``stamp`` and the checkpoint assignment ignore it.

Placing snapshots into checkpoints: slime has no post-save hook, so
:class:`CheckpointWatcher` runs in the launcher while it follows the job. It polls
``<save>`` and stamps a checkpoint once it is complete, i.e. once Megatron's
``latest_checkpointed_iteration.txt`` (written after the save finished) reaches it;
stamping earlier could race Megatron's own writes into a fresh ``iter_`` dir. Only
checkpoints the current run wrote are stamped: those absent at launch (recorded in the
snapshot with their files' mtimes), and those present at launch that this run rewrote
(a run without ``--load`` restarts at iteration 0); a rewritten one gets the new
snapshot in place of the old. So after ``clawgym resume`` older checkpoints keep the
snapshot of the run that wrote them.

When the launcher cannot follow the job:

- detach mode (``ray.detach=true``) or a launcher that exits early: no watcher runs.
- a save dir on a filesystem the launcher cannot see (an existing remote cluster):
  the snapshot lands at that path on the launcher's machine, where the watcher sees no
  checkpoints (or, when the path cannot be created there, the launch stops before
  submitting and says so). The W&B config file is then not given to the job either
  (``wandb.config_file``, see :mod:`clawgym.trainer.wandb_env`).

In both cases run ``clawgym stamp <save>`` on a machine that sees the save dir
(``--follow`` keeps watching until interrupted; for a remote save dir, first copy
``<save>/clawgym/`` from the launcher's machine into it): it assigns each complete,
unstamped checkpoint to the snapshot of the launch that preceded it (using the
checkpoints each snapshot recorded at launch). ``clawgym show <save>`` lists checkpoints
without one.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import yaml

from clawgym.common.fsutil import atomic_write_text, write_synced
from clawgym.config.schema import GROUPS

from clawgym.common.savedir import SNAPSHOTS_RELPATH  # noqa: E402,F401  (kept importable from here)
#: Name of the snapshot copy inside a checkpoint dir.
STAMP_DIRNAME = "clawgym_snapshot"
#: Megatron's tracker of the newest complete checkpoint.
TRACKER_FILE = "latest_checkpointed_iteration.txt"
#: Format version of meta.json (2: with manifest.json).
FORMAT_VERSION = 2

CONFIG_FILE = "config.yaml"
RESOLVED_FILE = "config.resolved.yaml"
OVERRIDES_FILE = "overrides.yaml"
CHOICES_FILE = "choices.yaml"
PLAN_FILE = "launch_plan.json"
META_FILE = "meta.json"
STAMP_FILE = "stamp.json"
MANIFEST_FILE = "manifest.json"
# submitted.json and ended.json (how the job ended, as the launcher that followed it saw it:
# ``clawgym runs`` once Ray is gone); named in clawgym.common.savedir, read by clawgym.common.ownership too.
from clawgym.common.savedir import ENDED_FILE, SUBMITTED_FILE  # noqa: E402
#: How a tuner's trial ended (study, trial number, state, objective, steps), for ``clawgym runs``.
TRIAL_FILE = "trial.json"
#: Files a snapshot dir may hold beyond those its manifest lists (added after it was written).
UNLISTED_FILES = (MANIFEST_FILE, SUBMITTED_FILE, STAMP_FILE, ENDED_FILE, TRIAL_FILE)

from clawgym.common.secrets import KNOWN_SECRET_ENV, MIN_SECRET_LEN  # noqa: E402,F401  (kept importable from here)

#: Packages whose versions a snapshot records (read from metadata; nothing is imported).
VERSIONED_PACKAGES = ("clawgym", "hydra-core", "omegaconf", "ray", "wandb")

_ITER_RE = re.compile(r"^iter_(\d{7,})$")


class SnapshotError(Exception):
    """A snapshot could not be written or read; ``str()`` is the user-facing message."""


# ---------------------------------------------------------------- what the launch was

@dataclass
class LaunchRecord:
    """What a launch knows beyond the config, for launches outside ``@hydra.main``."""

    # Command-line overrides that produced the config.
    overrides: Optional[List[str]] = None
    # Chosen option per config group.
    choices: Optional[Dict[str, str]] = None
    # How the launch came about (e.g. {"command": "resume", "from_snapshot": ...}).
    origin: Dict[str, Any] = field(default_factory=dict)


    @classmethod
    def from_hydra(cls, hydra_node: Any, *, command: str = "hydra") -> "LaunchRecord":
        """The record in a job's ``hydra`` node (``HydraConfig.get()`` or a sweep job's config.hydra)."""
        choices = {str(k): str(v) for k, v in hydra_node.runtime.choices.items() if k in GROUPS and v is not None}
        return cls(overrides=[str(o) for o in hydra_node.overrides.task], choices=choices,
                   origin={"command": command, "mode": str(hydra_node.mode)})


_RECORD: Optional[LaunchRecord] = None


@contextlib.contextmanager
def recorded_launch(record: LaunchRecord) -> Iterator[LaunchRecord]:
    """Make ``record`` what :func:`write_launch_snapshot` stores for launches inside the block.

    ``clawgym resume`` uses it: the launch runs outside Hydra, so Hydra cannot say.
    """
    global _RECORD
    previous, _RECORD = _RECORD, record
    try:
        yield record
    finally:
        _RECORD = previous


def _hydra_record() -> LaunchRecord:
    """Overrides and group choices of the current Hydra job, when there is one."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return LaunchRecord()
    hc = HydraConfig.get()
    if _has_sweep(hc.overrides.task):
        # The multirun's primary config (a sweep launcher process), not one job's: unknown.
        return LaunchRecord(origin={"command": "hydra", "mode": str(hc.mode)})
    return LaunchRecord.from_hydra(hc)


def _has_sweep(overrides: Sequence[str]) -> bool:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        return any(o.is_sweep_override() for o in OverridesParser.create().parse_overrides(list(overrides)))
    except Exception:  # noqa: BLE001 - unparsable means we cannot tell; do not guess
        return True


# ---------------------------------------------------------------- facts about the machine

def package_versions() -> Dict[str, Optional[str]]:
    # Imported here: importlib.metadata costs ~15 ms, and a dry run imports this module but never
    # asks for versions (only a launch's snapshot does).
    from importlib import metadata

    out: Dict[str, Optional[str]] = {}
    for name in VERSIONED_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    out["python"] = sys.version.split()[0]
    return out


def git_info(path: str | os.PathLike) -> Dict[str, Any]:
    """Commit and dirty flag of the checkout at ``path``; ``error`` says why when there is none."""
    p = Path(path)
    info: Dict[str, Any] = {"path": str(p), "commit": None, "dirty": None}
    if not p.is_dir():
        return {**info, "error": "directory not found"}

    def git(*args: str) -> subprocess.CompletedProcess:
        # No optional locks: never contend with the user's own git commands in that checkout.
        return subprocess.run(["git", "-C", str(p), *args], capture_output=True, text=True, timeout=20,
                              env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"})

    try:
        head = git("rev-parse", "HEAD")
        if head.returncode != 0:
            return {**info, "error": "not a git checkout"}
        status = git("status", "--porcelain", "--untracked-files=no")
        top = git("rev-parse", "--show-toplevel")
    except FileNotFoundError:
        return {**info, "error": "git is not installed"}
    except subprocess.TimeoutExpired:
        return {**info, "error": "git timed out"}
    return {**info, "commit": head.stdout.strip(), "dirty": bool(status.stdout.strip()),
            "toplevel": top.stdout.strip() or None}


# ---------------------------------------------------------------- checkpoints

@dataclass
class Checkpoint:
    """One ``iter_XXXXXXX`` dir of a save dir."""

    # Megatron iteration (slime's rollout id).
    iteration: int
    path: Path
    # meta.json of the snapshot placed into it, None when it carries none.
    stamp: Optional[Dict[str, Any]]
    # At or below the tracker: the save finished.
    complete: bool

    @property
    def stamp_id(self) -> Optional[str]:
        return self.stamp.get("id") if self.stamp else None


def read_tracker(save_dir: str | os.PathLike) -> Optional[int]:
    """The iteration in ``latest_checkpointed_iteration.txt``, None when absent or not a number."""
    try:
        text = (Path(save_dir) / TRACKER_FILE).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _tracker_state(save_dir: Path) -> Tuple[Optional[int], Optional[int]]:
    """(iteration, mtime_ns) of the tracker: a rewrite shows even when the number repeats."""
    try:
        mtime = (save_dir / TRACKER_FILE).stat().st_mtime_ns
    except OSError:
        return None, None
    return read_tracker(save_dir), mtime


def _iter_dirs(save_dir: Path) -> Dict[int, Path]:
    out: Dict[int, Path] = {}
    try:
        entries = list(save_dir.iterdir())
    except OSError:
        return out
    for entry in entries:
        m = _ITER_RE.match(entry.name)
        if m and entry.is_dir():
            out[int(m.group(1))] = entry
    return out


def _read_json(path: Path) -> Optional[Dict[str, Any]]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def list_checkpoints(save_dir: str | os.PathLike) -> List[Checkpoint]:
    save = Path(save_dir)
    tracker = read_tracker(save)
    return [Checkpoint(it, p, _read_json(p / STAMP_DIRNAME / META_FILE), tracker is not None and it <= tracker)
            for it, p in sorted(_iter_dirs(save).items())]


def has_checkpoint(save_dir: str | os.PathLike) -> bool:
    """True when the trainer's ``--load`` would find a checkpoint to continue from."""
    return read_tracker(save_dir) is not None and any(c.complete for c in list_checkpoints(save_dir))


def _fingerprint(ckpt: Path) -> int:
    """Newest mtime among a checkpoint's own entries: changes when the trainer rewrites it."""
    newest = 0
    try:
        entries = list(ckpt.iterdir())
    except OSError:
        return newest
    for entry in entries:
        if entry.name.startswith(".") or entry.name == STAMP_DIRNAME:
            continue
        try:
            newest = max(newest, entry.stat().st_mtime_ns)
        except OSError:
            pass
    return newest


def checkpoint_baseline(save_dir: str | os.PathLike) -> Dict[str, Any]:
    """What a save dir holds at launch; later checkpoints belong to the new run."""
    save = Path(save_dir)
    tracker, mtime = _tracker_state(save)
    dirs = _iter_dirs(save)
    return {"tracker": tracker, "tracker_mtime_ns": mtime, "iterations": sorted(dirs),
            "fingerprints": {str(it): _fingerprint(p) for it, p in sorted(dirs.items())}}


# ---------------------------------------------------------------- secrets

def secret_values(plan: Any, environ: Mapping[str, str] = os.environ,
                  extra_names: Sequence[str] = ()) -> Dict[str, str]:
    """Variable name -> value of every secret variable set in ``environ``."""
    from clawgym.common.secrets import env_secrets

    names = set(extra_names)
    for sources in (getattr(plan, "secret_env", None) or {}).values():
        names.update(sources)
    return env_secrets(environ, names)


def find_secrets(text: str, secrets: Mapping[str, str]) -> List[str]:
    """Names of the secrets whose value occurs in ``text``."""
    from clawgym.common.secrets import find_in

    return find_in(text, secrets)


# ---------------------------------------------------------------- writing

def _dump_yaml(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True)


def _snapshot_base(plan: Any) -> Path:
    """Directory the snapshots of a plan go to."""
    if plan.save_dir:
        return Path(plan.save_dir) / SNAPSHOTS_RELPATH
    # paths.save=null: nothing to checkpoint, but the launch is still recorded.
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        return Path(HydraConfig.get().runtime.output_dir) / "clawgym_snapshots"
    return Path.cwd() / "clawgym_snapshots"


def snapshot_files(cfg: Any, plan: Any, record: LaunchRecord, *, snapshot_id: str,
                   now: Optional[float] = None) -> Dict[str, str]:
    """File name -> content of a snapshot (also used by tests to know what is written)."""
    from omegaconf import DictConfig, OmegaConf

    from clawgym.config.compose import to_plain
    from clawgym.trainer.wandb_env import CONFIG_FILE_ENV

    if isinstance(cfg, DictConfig):
        unresolved, resolved = to_plain(cfg, resolve=False), to_plain(cfg, resolve=True)
    else:
        unresolved = resolved = OmegaConf.to_container(OmegaConf.create(dict(cfg)), resolve=True)
    now = time.time() if now is None else now
    paths = resolved.get("paths", {})
    git = {name: git_info(paths[name]) for name in ("root", "slime", "megatron") if paths.get(name)}
    git["clawgym"] = git_info(Path(__file__).resolve().parents[1])
    meta = {
        "format": FORMAT_VERSION,
        "id": snapshot_id,
        "submission_id": plan.submission_id,
        "run_name": plan.run_name,
        "exp_name": resolved.get("exp_name"),
        "save_dir": plan.save_dir,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
        "created_unix": now,
        "host": socket.gethostname(),
        "user": getpass.getuser(),
        "cwd": os.getcwd(),
        "command": list(sys.argv),
        "origin": record.origin,
        "versions": package_versions(),
        "git": git,
        # Names only: the values are read from the environment at launch.
        "secret_env": dict(plan.secret_env),
        "wandb_config_file": plan.runtime_env.get("env_vars", {}).get(CONFIG_FILE_ENV),
        "checkpoints_at_launch": checkpoint_baseline(plan.save_dir) if plan.save_dir else None,
    }
    return {
        CONFIG_FILE: _dump_yaml(unresolved),
        RESOLVED_FILE: _dump_yaml(resolved),
        OVERRIDES_FILE: _dump_yaml(record.overrides),
        CHOICES_FILE: _dump_yaml(record.choices),
        PLAN_FILE: plan.to_json(),
        META_FILE: json.dumps(meta, indent=2) + "\n",
    }


def _unique_name(base: Path, name: str) -> str:
    candidate, n = name, 1
    while (base / candidate).exists():
        n += 1
        candidate = f"{name}.{n}"
    return candidate


def write_job_files(plan: Any) -> None:
    """The files the job reads that clawgym generates (``plan.files``: ``--sglang-config``, the
    services spec) and, with services, the supervisor that runs them (clawgym/jobside/)."""
    for path, text in (getattr(plan, "files", None) or {}).items():
        atomic_write_text(Path(path), text)
    if getattr(plan, "services", None):
        from clawgym.plan.build import supervisor_path

        source = Path(__file__).resolve().parents[1] / "jobside" / "run_services.py"
        atomic_write_text(Path(supervisor_path(plan.save_dir)), source.read_text(encoding="utf-8"))


def write_launch_snapshot(cfg: Any, plan: Any, *, record: Optional[LaunchRecord] = None) -> Path:
    """Write a new snapshot of a launch into its save dir and return the snapshot dir.

    Called before the job is submitted (never for dry runs). Earlier snapshots are never
    touched; the W&B config file (when the plan has the job read one) is replaced.
    Overrides and choices come from ``record``, else :func:`recorded_launch`, else the
    current Hydra job (a sweep launcher passes ``LaunchRecord.from_hydra(job_config.hydra)``).
    Raises :class:`SnapshotError` when a secret value would be written.
    """
    from clawgym.trainer.wandb_env import CONFIG_FILE_ENV, wandb_config_document

    if record is None:
        record = _RECORD if _RECORD is not None else _hydra_record()
    base = _snapshot_base(plan)
    name = _unique_name(base, re.sub(r"[^A-Za-z0-9_.-]+", "-", plan.submission_id))
    files = snapshot_files(cfg, plan, record, snapshot_id=name)

    resolved = yaml.safe_load(files[RESOLVED_FILE])
    secrets = secret_values(plan, extra_names=(resolved.get("wandb") or {}).get("key_env") or [])
    wandb_file = plan.runtime_env.get("env_vars", {}).get(CONFIG_FILE_ENV)
    wandb_text = None
    if wandb_file:
        launch = {"id": name, "submission_id": plan.submission_id, "snapshot": str(base / name),
                  "overrides": record.overrides, "choices": record.choices, "origin": record.origin,
                  "git": {k: v.get("commit") for k, v in json.loads(files[META_FILE])["git"].items()}}
        wandb_text = _dump_yaml(wandb_config_document(resolved, launch))
    leaks = {fname: find_secrets(text, secrets) for fname, text in
             [*files.items(), *([(wandb_file, wandb_text)] if wandb_text else [])]}
    leaks = {k: v for k, v in leaks.items() if v}
    if leaks:
        where = "; ".join(f"{f} would contain the value of ${', $'.join(names)}" for f, names in leaks.items())
        raise SnapshotError(
            f"clawgym: refusing to write the config snapshot: {where}.\n"
            "  rule: secrets are read from the environment at launch and are never stored\n"
            "  fix:  remove the secret from the overrides/config (e.g. extra_env, extra_args) and export it instead")

    try:
        base.mkdir(parents=True, exist_ok=True)
        _remove_dead_temp_dirs(base)
        tmp = base / f".tmp-{name}-{socket.gethostname()}-{os.getpid()}"
        try:
            tmp.mkdir()
            for fname, text in files.items():
                write_synced(tmp / fname, text)
            # Last: a snapshot with a manifest that matches its files is whole.
            write_synced(tmp / MANIFEST_FILE, manifest_text(files))
            # A same-named snapshot that appeared meanwhile makes the rename fail: never overwrite.
            os.rename(tmp, base / name)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        if wandb_file and wandb_text:
            atomic_write_text(Path(wandb_file), wandb_text)
        write_job_files(plan)
    except OSError as exc:
        raise SnapshotError(
            f"clawgym: cannot write the config snapshot into {base}: {exc.strerror or exc}; nothing was started.\n"
            "  rule: every launch records its config in its save dir (paths.save) before the job is submitted\n"
            "  fix:  launch from a machine that mounts the save dir, or set paths.save to a writable path "
            "that the cluster shares") from None
    return base / name


def _remove_dead_temp_dirs(base: Path) -> None:
    """Remove temp dirs that a crashed launch on this host left behind (its process is gone)."""
    host = socket.gethostname()
    for entry in base.glob(".tmp-*"):
        head, _, pid = entry.name.rpartition("-")
        if not pid.isdigit() or not head.endswith(f"-{host}"):
            continue  # another host's launch: it may still be writing
        try:
            os.kill(int(pid), 0)  # existence probe only; sends nothing
            continue
        except ProcessLookupError:
            shutil.rmtree(entry, ignore_errors=True)
        except OSError:
            continue


# ---------------------------------------------------------------- reading

@dataclass
class Snapshot:
    """A snapshot read back from disk."""

    path: Path
    meta: Dict[str, Any]
    # Resolved config, as the run used it.
    config: Dict[str, Any]
    # Composed config with interpolations kept.
    config_unresolved: Dict[str, Any]
    overrides: Optional[List[str]]
    choices: Optional[Dict[str, str]]
    # launch_plan.json.
    plan: Dict[str, Any]

    @property
    def id(self) -> str:
        return str(self.meta.get("id") or self.path.name)

    @property
    def created(self) -> float:
        return float(self.meta.get("created_unix") or 0.0)


def is_snapshot_dir(path: Path) -> bool:
    """True for a folder that is (or was meant to be) a snapshot: it has its meta or manifest."""
    return (path / META_FILE).is_file() or (path / MANIFEST_FILE).is_file()


def _sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def manifest_text(files: Mapping[str, str]) -> str:
    """manifest.json for a snapshot's files (name -> text): size and sha256 of each."""
    entries = {}
    for name, text in files.items():
        data = text.encode()
        entries[name] = {"size": len(data), "sha256": _sha256(data)}
    return json.dumps({"format_version": FORMAT_VERSION, "files": entries}, indent=2) + "\n"


def verify_snapshot(path: str | os.PathLike) -> Dict[str, Any]:
    """Check a snapshot against its manifest; returns the manifest.

    Raises :class:`SnapshotError` naming the snapshot, what is wrong (no manifest, a file
    missing, truncated or altered) and what to do.
    """
    p = Path(path)
    fix = ("  fix:  this snapshot cannot be trusted; move it out of the snapshots folder "
           f"(mv {p} <elsewhere>) to use the launch before it, or launch again")
    if is_legacy_snapshot(p):
        # Format 1 had no manifest to check sizes against: its files must parse, and its config
        # hold every key that format wrote and agree with its plan (a file cut at a line end
        # still parses as YAML, with the later keys missing).
        problems = _legacy_problems(p)
        if problems:
            raise SnapshotError(f"clawgym: snapshot {p} (format 1, no manifest) is damaged: {'; '.join(problems)}\n"
                                f"{fix}")
        return {"format_version": 1, "files": {}, "legacy": True}
    try:
        manifest = json.loads((p / MANIFEST_FILE).read_text())
        listed = manifest["files"]
        assert isinstance(listed, dict) and listed
    except FileNotFoundError:
        raise SnapshotError(f"clawgym: snapshot {p} is incomplete: it has no {MANIFEST_FILE} (the last file a "
                            f"launch writes), so it was cut short or edited\n{fix}") from None
    except (OSError, ValueError, KeyError, TypeError, AssertionError):
        raise SnapshotError(f"clawgym: snapshot {p} has an unreadable {MANIFEST_FILE}\n{fix}") from None
    problems = []
    for name, want in sorted(listed.items()):
        try:
            data = (p / name).read_bytes()
        except OSError:
            problems.append(f"{name} is missing")
            continue
        if len(data) != want.get("size"):
            problems.append(f"{name} is {len(data)} bytes, the manifest says {want.get('size')} "
                            f"({'truncated' if len(data) < (want.get('size') or 0) else 'altered'})")
        elif _sha256(data) != want.get("sha256"):
            problems.append(f"{name} was altered (its sha256 differs from the manifest)")
    extra = sorted(f.name for f in p.iterdir() if f.name not in listed and f.name not in UNLISTED_FILES)
    problems += [f"{name} is not part of the snapshot" for name in extra]
    if problems:
        raise SnapshotError(f"clawgym: snapshot {p} is damaged: {'; '.join(problems)}\n{fix}")
    return manifest


#: Top-level keys of every config a format-1 snapshot holds (ClawGymConfig when format 2 came).
LEGACY_CONFIG_KEYS = ("model", "gpu_layout", "rollout", "grpo", "perf", "optimizer", "eval", "sglang", "sandbox",
                      "paths", "checkpoint", "ray", "wandb", "exp_name", "run_name", "skip_checks", "extra_args")


def _legacy_problems(p: Path) -> List[str]:
    """What is wrong with the files of a format-1 snapshot, each naming its file."""
    problems: List[str] = []
    loaded: Dict[str, Any] = {}
    for name in (RESOLVED_FILE, CONFIG_FILE, OVERRIDES_FILE, CHOICES_FILE, PLAN_FILE):
        try:
            text = (p / name).read_text()
            loaded[name] = json.loads(text) if name.endswith(".json") else yaml.safe_load(text)
        except FileNotFoundError:
            problems.append(f"{name} is missing")
        except (OSError, ValueError, yaml.YAMLError) as exc:
            problems.append(f"{name} does not parse ({type(exc).__name__}; truncated?)")
    for name in (RESOLVED_FILE, CONFIG_FILE):
        doc = loaded.get(name)
        if name in loaded and not isinstance(doc, dict):
            problems.append(f"{name} holds no config mapping (truncated?)")
        elif isinstance(doc, dict):
            missing = [k for k in LEGACY_CONFIG_KEYS if k not in doc]
            if missing:
                problems.append(f"{name} lacks {', '.join(missing)} (truncated?)")
    resolved, plan = loaded.get(RESOLVED_FILE), loaded.get(PLAN_FILE)
    if isinstance(resolved, dict) and isinstance(plan, dict) and "run_name" in resolved and "run_name" in plan \
            and str(resolved["run_name"]) != str(plan["run_name"]):
        problems.append(f"{RESOLVED_FILE} names run {resolved['run_name']!r} but {PLAN_FILE} {plan['run_name']!r}")
    return problems


def is_legacy_snapshot(path: str | os.PathLike) -> bool:
    """True for a snapshot of format 1 (clawgym before manifests): no manifest, and a meta.json
    that parses and says ``"format": 1``. A cut-short format-2 snapshot never matches: its meta
    says format 2."""
    p = Path(path)
    if (p / MANIFEST_FILE).exists():
        return False
    try:
        meta = json.loads((p / META_FILE).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and meta.get("format") == 1


def is_submitted(path: str | os.PathLike) -> bool:
    """True once the launch that wrote the snapshot submitted its job (:func:`mark_submitted`).

    A format-1 snapshot counts as a launch, as it did when it was written (that format did not
    record submission)."""
    return (Path(path) / SUBMITTED_FILE).is_file() or is_legacy_snapshot(path)


def mark_submitted(snapshot_dir: str | os.PathLike, submission_id: str, *, address: str = "",
                   job: Optional[Mapping[str, Any]] = None) -> None:
    """Record that the job of this snapshot's launch was submitted; call right after Ray
    accepted it. Until then the snapshot is not listed as a launch. ``job``: where the job
    runs, as :mod:`clawgym.common.ownership` asks about it (a SLURM job names its cluster: ``cluster``
    and ``controller`` of ``scontrol show config``)."""
    if not snapshot_dir:
        return
    record: Dict[str, Any] = {"submission_id": submission_id, "address": address, "submitted_unix": time.time()}
    if job:
        record["job"] = dict(job)
    atomic_write_text(Path(snapshot_dir) / SUBMITTED_FILE, json.dumps(record) + "\n")


def mark_ended(snapshot_dir: Optional[str | os.PathLike], status: str, exit_code: Optional[int]) -> None:
    """Record how the followed job ended (succeeded / failed / stopped), for when no cluster can say."""
    if not snapshot_dir or not Path(snapshot_dir).is_dir():
        return
    atomic_write_text(Path(snapshot_dir) / ENDED_FILE,
                      json.dumps({"status": status, "exit_code": exit_code, "ended_unix": time.time()}) + "\n")


def mark_trial(snapshot_dir: Optional[str | os.PathLike], trial: Mapping[str, Any]) -> None:
    """Record how the tuner's trial that this launch ran ended (:data:`TRIAL_FILE`)."""
    if not snapshot_dir or not Path(snapshot_dir).is_dir():
        return
    atomic_write_text(Path(snapshot_dir) / TRIAL_FILE, json.dumps(dict(trial), indent=2) + "\n")


def discard_unsubmitted(snapshot_dir: Optional[str | os.PathLike]) -> bool:
    """Remove the snapshot of a launch that stopped before submitting its job; True when removed.

    A snapshot already marked submitted is never removed.
    """
    if not snapshot_dir:
        return False
    p = Path(snapshot_dir)
    if not p.is_dir() or is_submitted(p) or p.parent.name not in ("snapshots", "clawgym_snapshots"):
        return False
    # Rename first (atomic), so no reader sees a half-removed snapshot.
    gone = p.parent / f".discarded-{p.name}-{os.getpid()}"
    try:
        os.rename(p, gone)
    except OSError:
        return False
    shutil.rmtree(gone, ignore_errors=True)
    # The launch wrote nothing else there: leave no empty clawgym/snapshots/ (nor clawgym/) that
    # would mark the folder as a run's save dir (rmdir removes only empty dirs).
    for empty in (p.parent, p.parent.parent):
        try:
            empty.rmdir()
        except OSError:
            break
    return True


def load_snapshot(path: str | os.PathLike) -> Snapshot:
    """Read a snapshot after checking it against its manifest (:class:`SnapshotError` if damaged)."""
    p = Path(path)
    if not is_snapshot_dir(p):
        raise SnapshotError(f"clawgym: {p} is not a clawgym snapshot (no {META_FILE} / {MANIFEST_FILE})")
    verify_snapshot(p)
    try:
        return Snapshot(
            path=p,
            meta=json.loads((p / META_FILE).read_text()),
            config=yaml.safe_load((p / RESOLVED_FILE).read_text()),
            config_unresolved=yaml.safe_load((p / CONFIG_FILE).read_text()),
            overrides=yaml.safe_load((p / OVERRIDES_FILE).read_text()),
            choices=yaml.safe_load((p / CHOICES_FILE).read_text()),
            plan=json.loads((p / PLAN_FILE).read_text()),
        )
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise SnapshotError(f"clawgym: snapshot {p} is unreadable: {exc}") from None


def snapshot_dirs(save_dir: str | os.PathLike) -> List[Path]:
    """Every snapshot dir of a save dir, whatever its state (temp dirs are skipped), by name."""
    base = Path(save_dir) / SNAPSHOTS_RELPATH
    try:
        return sorted(e for e in base.iterdir() if not e.name.startswith(".") and e.is_dir() and is_snapshot_dir(e))
    except OSError:
        return []


def unsubmitted_snapshots(save_dir: str | os.PathLike) -> List[Path]:
    """Snapshot dirs of launches that never submitted their job (interrupted in between)."""
    return [p for p in snapshot_dirs(save_dir) if not is_submitted(p)]


def list_snapshots(save_dir: str | os.PathLike) -> List[Snapshot]:
    """Every launch of a save dir, oldest first: its submitted snapshots.

    Snapshots never submitted are left out (:func:`unsubmitted_snapshots`); a damaged
    submitted one raises :class:`SnapshotError`, since which launch wrote which
    checkpoint depends on all of them.
    """
    snaps = [load_snapshot(p) for p in snapshot_dirs(save_dir) if is_submitted(p)]
    return sorted(snaps, key=lambda s: (s.created, s.id))


def find_snapshot(target: str | os.PathLike) -> Tuple[Snapshot, Optional[Path]]:
    """(snapshot, save dir or None) for a save dir (its latest launch), snapshot dir or checkpoint dir.

    Raises :class:`SnapshotError` for a damaged snapshot (see :func:`verify_snapshot`).
    """
    p = Path(target).expanduser()
    if not p.exists():
        raise SnapshotError(f"clawgym: {p} does not exist")
    if is_snapshot_dir(p):
        save = p.parent.parent.parent if p.parent.name == "snapshots" else None
        return load_snapshot(p), save
    if is_snapshot_dir(p / STAMP_DIRNAME):
        return load_snapshot(p / STAMP_DIRNAME), p.parent
    snaps = list_snapshots(p)
    if not snaps and unsubmitted_snapshots(p):
        raise SnapshotError(f"clawgym: {p} holds no launch: its only snapshot(s) "
                            f"({', '.join(x.name for x in unsubmitted_snapshots(p))}) belong to launches stopped "
                            "before their job was submitted\n  fix:  launch the run (python train.py ...)")
    if not snaps:
        raise SnapshotError(f"clawgym: no clawgym snapshot in {p} (looked for {p / SNAPSHOTS_RELPATH}/*/{META_FILE}); "
                            "it is not a save dir of a clawgym launch, a snapshot dir or a checkpoint dir")
    return snaps[-1], p


# ---------------------------------------------------------------- stamping checkpoints

def place_snapshot(snapshot_dir: str | os.PathLike, checkpoint_dir: str | os.PathLike, *,
                   replace: bool = False, by: str = "watcher") -> bool:
    """Copy a snapshot into a checkpoint dir atomically; True when it placed it.

    Skips a checkpoint that already carries this snapshot, and one carrying another
    snapshot unless ``replace`` (the current run rewrote that checkpoint).
    """
    src, ckpt = Path(snapshot_dir), Path(checkpoint_dir)
    verify_snapshot(src)  # a damaged snapshot is never copied into checkpoints
    target = ckpt / STAMP_DIRNAME
    my_id = (_read_json(src / META_FILE) or {}).get("id")
    existing = _read_json(target / META_FILE)
    if existing is not None and (existing.get("id") == my_id or not replace):
        return False
    tag = f"{os.getpid()}-{threading.get_ident()}"
    tmp, old = ckpt / f".{STAMP_DIRNAME}.tmp-{tag}", ckpt / f".{STAMP_DIRNAME}.old-{tag}"
    try:
        # File by file into a fresh dir (snapshots are flat): copytree would recreate a
        # checkpoint dir that Megatron's retention deleted meanwhile.
        os.mkdir(tmp)
        for f in sorted(src.iterdir()):
            shutil.copyfile(f, tmp / f.name)
        write_synced(tmp / STAMP_FILE, json.dumps({"iteration": _iteration_of(ckpt), "stamped_by": by,
                                                  "stamped_at": time.time()}) + "\n")
        if target.exists():
            os.rename(target, old)
        try:
            os.rename(tmp, target)
        except OSError:
            # Someone placed one meanwhile (a non-empty target is never replaced by rename).
            if old.exists() and not target.exists():
                os.rename(old, target)
            return False
        return True
    finally:
        for leftover in (tmp, old):
            if leftover.exists():
                shutil.rmtree(leftover, ignore_errors=True)


def _iteration_of(ckpt: Path) -> Optional[int]:
    m = _ITER_RE.match(ckpt.name)
    return int(m.group(1)) if m else None


class CheckpointWatcher:
    """Places a launch's snapshot into each checkpoint its run writes, while the job runs.

    Polls ``save_dir`` every ``poll_interval`` seconds in a daemon thread. A checkpoint is
    stamped once complete (the tracker reached it) and only if this run wrote it: absent
    when the snapshot was taken (its ``checkpoints_at_launch``), or the one the tracker
    moves to after launch. ``stop()`` does a last scan, so a checkpoint written just before
    the job ended is stamped too. Errors (e.g. a checkpoint deleted by Megatron's retention
    while copying) are collected in ``errors`` and never stop the watcher. See the module
    doc for detached launches and save dirs the launcher cannot see.
    """

    def __init__(self, save_dir: str | os.PathLike, snapshot_path: str | os.PathLike, *,
                 poll_interval: float = 2.0):
        self.save_dir = Path(save_dir)
        self.snapshot_path = Path(snapshot_path)
        self.poll_interval = poll_interval
        meta = _read_json(self.snapshot_path / META_FILE)
        if meta is None:
            raise SnapshotError(f"clawgym: {self.snapshot_path} is not a clawgym snapshot")
        self.snapshot_id: str = meta["id"]
        # Without a recorded baseline (older snapshot), what is there now predates the run.
        baseline = meta.get("checkpoints_at_launch") or checkpoint_baseline(self.save_dir)
        self._before = set(baseline["iterations"])
        self._fingerprints = {int(k): v for k, v in (baseline.get("fingerprints") or {}).items()}
        self._launch_tracker = (baseline["tracker"], baseline["tracker_mtime_ns"])
        self._seen_tracker = self._launch_tracker
        self._rewritten: set = set()
        #: Iterations stamped by this watcher, in order.
        self.stamped: List[int] = []
        #: Problems met while stamping (the watcher keeps going).
        self.errors: List[str] = []
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()

    def scan(self) -> List[int]:
        """Stamp what is due now; returns the iterations stamped by this scan."""
        with self._lock:
            state = _tracker_state(self.save_dir)
            latest = state[0]
            if latest is None:
                return []
            dirs = _iter_dirs(self.save_dir)
            if state != self._seen_tracker and state != self._launch_tracker:
                # The trainer just finished iter_<latest>, even if that number existed at launch
                # (a run started without --load rewrites the old numbers). Earlier rewrites show
                # in the files' mtimes; checked only when the tracker moves, so polling stays cheap.
                self._rewritten.add(latest)
                for it in self._before - self._rewritten:
                    if it in dirs and it <= latest and _fingerprint(dirs[it]) != self._fingerprints.get(it):
                        self._rewritten.add(it)
            self._seen_tracker = state
            due = {it: p for it, p in dirs.items()
                   if it <= latest and (it not in self._before or it in self._rewritten)}
            done = []
            for it, path in sorted(due.items()):
                try:
                    if place_snapshot(self.snapshot_path, path, replace=True):
                        done.append(it)
                except OSError as exc:
                    self.errors.append(f"{path}: {exc}")
            self.stamped += done
            return done

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.scan()
            except Exception as exc:  # noqa: BLE001 - a watcher must outlive surprises
                self.errors.append(f"scan: {exc!r}")
            self._stop.wait(self.poll_interval)

    def start(self) -> "CheckpointWatcher":
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="clawgym-checkpoint-watcher", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> List[int]:
        """Stop polling, do one final scan, and return every iteration stamped."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.scan()
        return list(self.stamped)

    def __enter__(self) -> "CheckpointWatcher":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def assign_checkpoints(save_dir: str | os.PathLike) -> Dict[int, Optional[Snapshot]]:
    """Which snapshot each complete checkpoint belongs to, from the launch records alone.

    A checkpoint belongs to the latest launch that did not find it at launch time.
    """
    snaps = [s for s in list_snapshots(save_dir) if s.meta.get("checkpoints_at_launch") is not None]
    out: Dict[int, Optional[Snapshot]] = {}
    for ck in list_checkpoints(save_dir):
        if not ck.complete:
            continue
        owners = [s for s in snaps if ck.iteration not in set(s.meta["checkpoints_at_launch"]["iterations"])]
        out[ck.iteration] = owners[-1] if owners else None
    return out


def stamp_save_dir(save_dir: str | os.PathLike) -> List[Tuple[int, str]]:
    """Place snapshots into the complete checkpoints that carry none (after the fact)."""
    placed = []
    for it, snap in sorted(assign_checkpoints(save_dir).items()):
        ckpt = Path(save_dir) / f"iter_{it:07d}"
        if snap is not None and place_snapshot(snap.path, ckpt, replace=False, by="clawgym stamp"):
            placed.append((it, snap.id))
    return placed


def start_checkpoint_watcher(plan: Any, snapshot: Optional[str]) -> Optional["CheckpointWatcher"]:
    """Stamp the launch snapshot into each checkpoint the job writes while it is followed (the
    launch pipeline and a SLURM allocation's runner both start it here); None when there is no
    save dir or snapshot, or the watcher cannot start (the run matters more than the stamps)."""
    import sys

    if not plan.save_dir or not snapshot:
        return None
    try:
        watcher = CheckpointWatcher(plan.save_dir, snapshot)
        watcher.start()
        return watcher
    except Exception as exc:
        print(f"[clawgym] checkpoint watcher not started ({exc}); stamp later with: clawgym stamp "
              f"{plan.save_dir} --follow", file=sys.stderr, flush=True)
        return None
