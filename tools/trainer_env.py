"""Building a trainer flavour's import environment on CPU: shared by the offline tools.

tools/gen_flag_registry.py (the trainers' parsers) and tools/trainer_judge.py (the trainers'
startup checks) both run a trainer's real code from plain source trees in a CPU-only
virtualenv (tools/README.md says how to build one). What they share lives here: patched copies
of Megatron-LM / SGLang in a temporary directory (the inputs are never modified), the import
path with the trainer's code first, and stand-in modules for imports that cannot load on CPU
and that the code run never uses (torchvision). Nothing here is imported by ``clawgym``.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import types
from dataclasses import dataclass


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def _apply_patches(tree_root, patches, include, tool="trainer_env"):
    for patch in patches:
        cmd = ["git", "apply", f"--include={include}", os.path.abspath(patch)]
        proc = subprocess.run(cmd, cwd=tree_root, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"{tool}: patch {patch} does not apply to the copy in {tree_root}:\n"
                     f"{proc.stderr.strip()}\nFix: pass the sources the patch was written for "
                     f"(see tools/README.md).")


def _package_dir(name, given, tool="trainer_env"):
    """Directory holding package `name` (the parent of `name/`)."""
    if given:
        if not os.path.isdir(os.path.join(given, name)):
            sys.exit(f"{tool}: no '{name}/' package in {given}; "
                     f"pass the directory that contains it (e.g. a site-packages or a checkout's python/).")
        return os.path.realpath(given)
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        sys.exit(f"{tool}: package '{name}' is not importable by {sys.executable}; "
                 f"install it (tools/README.md) or pass its location.")
    return os.path.realpath(os.path.dirname(list(spec.submodule_search_locations)[0]))


class _Placeholder:
    """Whatever a stand-in module is asked for at import time: attributes, calls, base classes.

    Import-time code of the trainer's dependencies does things like
    ``from torchvision.transforms import InterpolationMode`` or ``InterpolationMode.BICUBIC``
    at module level; parsing never calls into them."""

    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        return _Placeholder(f"{self._name}.{attr}")

    def __call__(self, *args, **kwargs):
        return _Placeholder(f"{self._name}()")

    def __mro_entries__(self, bases):
        return (object,)

    def __iter__(self):
        return iter(())

    def __repr__(self):
        return f"<stand-in {self._name}>"


def _stand_in(name, version=None):
    """A stand-in module registered under `name` (for modules that parsing never uses)."""
    module = types.ModuleType(name)
    module.__path__ = []  # a package, so submodule imports resolve to further stand-ins
    module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
    module.__clawgym_stand_in__ = True
    if version is not None and "." not in name:
        module.__version__ = version

    def __getattr__(attr):
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        return _Placeholder(f"{name}.{attr}")

    module.__getattr__ = __getattr__
    return module


def _settle_availability_probes(names):
    """Let transformers decide, before any stand-in exists, that these modules are not installed.

    transformers caches ``is_<name>_available()`` once; asked after SGLang's unconditional
    ``import torchvision`` has pulled in a stand-in, it would take the stand-in for a real
    install and ask for its version.  Asked first, it sees the truth (not installed) and
    keeps to its code path for environments without the module."""
    try:
        from transformers.utils import import_utils
    except ImportError:
        return
    for name in names:
        probe = getattr(import_utils, f"is_{name}_available", None)
        if callable(probe):
            probe()


class _StandInFinder:
    """Meta-path finder that serves stand-ins for the given top-level names and their submodules."""

    def __init__(self, specs):
        # "name" or "name==version"
        self.versions = {}
        for spec in specs:
            name, _, version = spec.partition("==")
            self.versions[name] = version or None
        self.names = set(self.versions)
        self.served = set()

    def find_spec(self, fullname, path=None, target=None):
        top = fullname.split(".")[0]
        if top not in self.names:
            return None
        # Feature probes (importlib.util.find_spec, as transformers' is_torchvision_available
        # does) see what is installed: nothing, unless the stand-in was given a version
        # because the importing code refuses to run without the module (tools/README.md).
        caller = sys._getframe(2)
        if self.versions[top] is None and caller.f_code.co_name == "find_spec" and \
                caller.f_code.co_filename.endswith(os.path.join("importlib", "util.py")):
            return None
        self.served.add(fullname)
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        return _stand_in(spec.name, self.versions[spec.name.split(".")[0]])

    def exec_module(self, module):
        return None


@dataclass
class Sources:
    """Where the trainer's code is imported from (after patching)."""

    slime_root: str
    megatron_root: str
    sglang_dir: str
    router_dir: str
    stand_ins: "_StandInFinder"


def prepare_sources(ns, workdir: str, tool: str = "trainer_env") -> Sources:
    """Patch copies into ``workdir``, put the trainer's code first on ``sys.path`` and install
    the stand-in finder. ``ns`` carries slime, megatron, sglang, router, megatron_patch,
    sglang_patch and stand_in (the command-line options both tools share)."""
    slime_root = os.path.realpath(ns.slime)
    megatron_root = os.path.realpath(ns.megatron)
    for label, root, pkg in (("--slime", slime_root, "slime"), ("--megatron", megatron_root, "megatron")):
        if not os.path.isdir(os.path.join(root, pkg)):
            sys.exit(f"{tool}: {label} {root} has no '{pkg}/' package; pass the checkout's root.")

    if ns.megatron_patch:
        copy_root = os.path.join(workdir, "megatron-src")
        shutil.copytree(os.path.join(megatron_root, "megatron"), os.path.join(copy_root, "megatron"))
        _apply_patches(copy_root, ns.megatron_patch, "megatron/*", tool)
        megatron_root = copy_root

    sglang_dir = _package_dir("sglang", ns.sglang, tool)
    if ns.sglang_patch:
        copy_root = os.path.join(workdir, "sglang-src")
        shutil.copytree(os.path.join(sglang_dir, "sglang"), os.path.join(copy_root, "python", "sglang"),
                        ignore=shutil.ignore_patterns("__pycache__"))
        _apply_patches(copy_root, ns.sglang_patch, "python/sglang/*", tool)
        sglang_dir = os.path.join(copy_root, "python")
    router_dir = _package_dir("sglang_router", ns.router, tool)

    # Trainer code first on the path: the patched copies shadow the installed packages.
    for path in (router_dir, sglang_dir, megatron_root, slime_root):
        if path in sys.path:
            sys.path.remove(path)
        sys.path.insert(0, path)

    stand_ins = _StandInFinder(ns.stand_in or [])
    if ns.stand_in:
        sys.meta_path.insert(0, stand_ins)
        unversioned = [n for n, v in stand_ins.versions.items() if v is None]
        if unversioned:
            _settle_availability_probes(unversioned)
    return Sources(slime_root, megatron_root, sglang_dir, router_dir, stand_ins)


def add_source_options(ap) -> None:
    """The command-line options that say where a flavour's sources are (both tools)."""
    ap.add_argument("--slime", required=True, help="slime checkout root (the directory holding slime/)")
    ap.add_argument("--megatron", required=True, help="Megatron-LM checkout root (holding megatron/)")
    ap.add_argument("--sglang", help="directory holding the sglang package (default: the installed one)")
    ap.add_argument("--router", help="directory holding the sglang_router package (default: the installed one)")
    ap.add_argument("--sglang-patch", action="append", default=[],
                    help="patch applied, in order, to a temporary copy of sglang (repeatable)")
    ap.add_argument("--megatron-patch", action="append", default=[],
                    help="patch applied to a temporary copy of Megatron-LM's megatron/ (repeatable)")
    ap.add_argument("--stand-in", action="append", default=[], metavar="MODULE[==VERSION]",
                    help="serve an empty stand-in for MODULE (and submodules) when the real one cannot "
                         "be imported on CPU and the code run never uses it; with ==VERSION it reports that "
                         "version and shows as installed to availability probes; recorded in the output")
