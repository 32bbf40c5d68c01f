"""A snapshot's manifest (size and sha256 of each file, written last) and the check of a snapshot
against it; snapshots of format 1 (before manifests) are checked by parsing their files."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, List, Mapping

import yaml

from clawgym.snapshot.layout import (CHOICES_FILE, CONFIG_FILE, FORMAT_VERSION, MANIFEST_FILE, META_FILE,
                                     OVERRIDES_FILE, PLAN_FILE, RESOLVED_FILE, UNLISTED_FILES, SnapshotError)


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
