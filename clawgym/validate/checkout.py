"""Rules about this machine, not the config alone: the checkout a launch from here uploads.

A dry run runs no preflight, so without these a ``paths.root`` that names no folder (a typo, or
the default: the current directory) printed a whole plan and exited 0. They run only where the
face asks for them (``check(..., here=True)``: ``train.py`` and the sweep), never in the pure
rules a config is held to anywhere (a config for another machine composes and validates).

Mirrors: clawgym's own preflight ``checkout`` (clawgym/preflight/checkout.py ``check_checkout``):
the job's working dir is ``paths.slime``, which Ray's packager zips on this machine for a local
head and for ``ray.address=`` alike. SLURM and KubeRay jobs find the checkout on the cluster
(a shared file system, the PVC), so they are not held to this machine's folders.
"""

from __future__ import annotations

import os
from typing import Optional

from clawgym.validate.core import Collector

#: Clusters whose job's working dir is packaged from this machine's paths.slime.
PACKAGED_HERE = ("local", "existing")
#: The preflight check that checks the same folders; naming it in skip_checks skips this too.
CHECK = "checkout"


def _holds_slime(folder: str) -> bool:
    return os.path.isdir(os.path.join(folder, "slime"))


def _checkout_near(start: str) -> Optional[str]:
    """The nearest folder at or above ``start`` that holds ``slime/`` (a ClawGym-RL checkout)."""
    folder = os.path.abspath(start)
    while True:
        if _holds_slime(folder):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def _fix(env_root: Optional[str]) -> str:
    found = _checkout_near(os.getcwd()) or (env_root if env_root and _holds_slime(env_root) else None)
    if found:
        return f"set paths.root={found} (a ClawGym-RL checkout: it holds slime/)"
    return ("set paths.root to your ClawGym-RL checkout, the folder that holds slime/ and Megatron-LM/ "
            "(e.g. paths.root=/path/to/ClawGym-Agents/RL), or run from inside it, or export CLAWGYM_RL_ROOT; "
            f"a dry run for another machine: cluster=slurm or cluster=kuberay, or skip_checks=[{CHECK}]")


def rule_checkout_here(v: Collector) -> None:
    """paths.root is a folder on this machine and paths.slime (the job's working dir) is in it."""
    cluster = (v.c.get("cluster") or {}).get("backend", "local")
    if cluster not in PACKAGED_HERE:
        return
    # preflight_only runs the preflight `checkout` check itself, which reports these folders in its
    # own report; skipping that check skips this one too.
    if CHECK in (v.c.get("skip_checks") or []) or v.c.get("preflight_only"):
        return
    paths = v.c.get("paths") or {}
    root, slime = paths.get("root"), paths.get("slime")
    if not isinstance(root, str) or not os.path.isabs(root):
        return  # paths-absolute reports it
    env_root = os.environ.get("CLAWGYM_RL_ROOT")
    if not os.path.isdir(root):
        v.add("checkout-exists", ["paths.root"],
              f"paths.root names no folder on this machine: a launch from here uploads paths.slime "
              f"({slime}) as the job's working dir and the job reads its data and checkpoints below paths.root",
              _fix(env_root))
        return
    if isinstance(slime, str) and os.path.isabs(slime) and not os.path.isdir(slime):
        # A warning, not a refusal (yet): the suite's dry runs plan from clawgym's own checkout, which
        # holds no slime/; the launch's preflight `checkout` refuses it before anything starts.
        derived = os.path.normpath(slime).startswith(os.path.normpath(root) + os.sep)
        v.warn("checkout-exists", ["paths.root", "paths.slime"] if derived else ["paths.slime"],
               "paths.slime (the job's working dir, uploaded from this machine) is no folder"
               + (f": paths.root={root} is not a ClawGym-RL checkout (it has no slime/)" if derived else "")
               + f"; a launch is refused by preflight `{CHECK}`",
               _fix(env_root) if derived else "set paths.slime to the slime checkout (it holds train.py)")
