"""A job's working dir, packaged before the cluster can take it.

Ray's job SDK hashes and zips the working dir at submission (``submit_job`` ->
``upload_working_dir_if_needed``), after the cluster answers. For a head clawgym starts,
that work can happen while the head comes up: each distinct working dir is zipped here with
Ray's own packager and Ray's own exclusion rules (its default excludes, the runtime env's
``excludes``, ``.gitignore``/``.rayignore`` unless ``RAY_RUNTIME_ENV_IGNORE_GITIGNORE=1``),
and the job is submitted with the zip as its working dir, which Ray accepts as is and
uploads under the zip's content hash (``gcs://_ray_pkg_<sha1>.zip``, unpacked on the node
without removing a top level, as a packaged directory is).

Packaging is an optimisation only: when Ray's packaging internals are not there or fail,
the job is submitted with the directory and Ray packages it as usual (reporting its own
errors, e.g. a working dir over Ray's size limit).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any, Dict, Optional, Sequence, Tuple


def _key(plan: Any) -> Optional[Tuple[str, Tuple[str, ...]]]:
    runtime_env = plan.runtime_env or {}
    if "working_dir" in runtime_env or not plan.working_dir:
        return None  # the plan names its own working dir (a URI, a zip): Ray's to handle
    return str(plan.working_dir), tuple(str(x) for x in runtime_env.get("excludes") or ())


class Packages:
    """Zipped working dirs of a launch's plans, in a temp dir removed by :meth:`cleanup`."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.zips: Dict[Tuple[str, Tuple[str, ...]], str] = {}

    @classmethod
    def build(cls, plans: Sequence[Any]) -> "Packages":
        packages = cls(tempfile.mkdtemp(prefix="clawgym-wd-"))
        for plan in plans:
            key = _key(plan)
            if key is not None and key not in packages.zips:
                path = packages._package(*key, index=len(packages.zips))
                if path is not None:
                    packages.zips[key] = path
        return packages

    def _package(self, directory: str, excludes: Tuple[str, ...], *, index: int) -> Optional[str]:
        if not os.path.isdir(directory):
            return None
        try:
            from pathlib import Path

            from ray._private import ray_constants
            from ray._private.runtime_env.packaging import create_package

            from clawgym.launch.rayjob import quiet_ray_sdk
        except ImportError:
            return None
        quiet_ray_sdk()  # packaging.py logs each package it creates at INFO
        target = Path(self.root) / f"working_dir_{index}.zip"
        include_gitignore = os.environ.get(getattr(ray_constants, "RAY_RUNTIME_ENV_IGNORE_GITIGNORE",
                                                   "RAY_RUNTIME_ENV_IGNORE_GITIGNORE"), "0") != "1"
        try:
            defaults = list(ray_constants.get_runtime_env_default_excludes())
            create_package(directory, target, include_gitignore=include_gitignore, include_parent_dir=False,
                           excludes=defaults + list(excludes))
        except Exception:
            target.unlink(missing_ok=True)
            return None
        return str(target)

    def get(self, plan: Any) -> Optional[str]:
        key = _key(plan)
        path = self.zips.get(key) if key is not None else None
        return path if path is not None and os.path.exists(path) else None

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
        self.zips.clear()
