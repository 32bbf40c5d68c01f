"""The house has one direction: imports read with ``ast`` hold the layers of docs/architecture.md.

Every import in clawgym/, train.py and launchers/ is read (at the top of a module and inside
functions; ``from x import y`` resolved to the module ``x.y`` when that is a module, relative imports
resolved against the importing package) and held against these rules:

- the layers are packages (``LAYERS``); the package root holds only the entry points
  (``ROOT_MODULES``): a new module there, or a package no layer names, fails until it is placed;
- an import between two packages is an arrow of ``ARROWS``, each with the reason it exists; every
  arrow goes down the layers, and one that no import draws any more fails (the table stays true);
- a module imports its own layer or lower layers, never a higher one;
- no import cycle among clawgym modules (every import counts, also one inside a function: Python
  runs it all the same, only later);
- no private name (``_x``) of another module imported or reached as ``module._x``;
- the face names no backend (``clawgym.backends*``): it asks the pipeline.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Set, Tuple

ROOT = Path(__file__).resolve().parents[1]

#: The layers from the top down (docs/architecture.md, "Layers"): each names packages (a package
#: and everything under it; ``train`` and the face's root modules are single modules). The package
#: root (``clawgym/*.py``) holds only the entry points named in ``ROOT_MODULES``.
LAYERS: List[Tuple[str, Tuple[str, ...]]] = [
    ("face", ("train", "clawgym.cli", "clawgym.__main__", "clawgym.app", "clawgym.commands", "clawgym.demo")),
    ("sweep/tuner", ("clawgym.sweep", "clawgym.tuner", "hydra_plugins.clawgym_launcher",
                     "hydra_plugins.clawgym_sweeper")),
    ("pipeline", ("clawgym.pipeline",)),
    ("supervision", ("clawgym.supervisor",)),
    ("checks and records", ("clawgym.preflight", "clawgym.runs", "clawgym.importer")),
    ("backends", ("clawgym.backends",)),
    ("ray jobs and snapshots", ("clawgym.launch", "clawgym.snapshot")),
    ("search", ("clawgym.search",)),
    ("translations", ("clawgym.validate", "clawgym.plan", "clawgym.steptime", "clawgym.memory")),
    ("base", ("clawgym", "clawgym.config", "clawgym.trainer", "clawgym.registry", "clawgym.common",
              "clawgym.jobside")),
]
#: Keep the old name: the floor helpers below read it.
FLOORS = LAYERS

#: Modules allowed at the package root: the entry points, nothing else (a new module goes into
#: the package of its layer).
ROOT_MODULES = {"clawgym", "clawgym.__main__", "clawgym.cli", "clawgym.app"}

#: Every arrow between two packages that the code may draw, and why. An import between packages
#: not named here fails (add the arrow with its reason, or import through what is allowed); an
#: arrow here that no import draws fails too, so the table stays the house as it is.
ARROWS: Dict[Tuple[str, str], str] = {
    # the face: train.py, the CLI and its commands
    ("train", "clawgym.app"): "train.py is @hydra.main over app.run",
    ("train", "clawgym.commands"): "--explain KEY is answered before Hydra starts",
    ("train", "clawgym.config"): "the config store and resolvers are registered before Hydra composes",
    ("clawgym.__main__", "clawgym.cli"): "python -m clawgym is the CLI",
    ("clawgym.cli", "clawgym.common"): "exit codes and masked messages",
    ("clawgym.app", "clawgym.common"): "console, exit codes, secrets, atomic writes",
    ("clawgym.app", "clawgym.config"): "the composed config as plain data",
    ("clawgym.app", "clawgym.memory"): "this node's GPU for the memory plan",
    ("clawgym.app", "clawgym.pipeline"): "a single run is a sweep of one: prepare, then the pipeline",
    ("clawgym.app", "clawgym.plan"): "build and print the launch plan",
    ("clawgym.app", "clawgym.preflight"): "preflight_only (the checks without a launch)",
    ("clawgym.app", "clawgym.registry"): "a registry that cannot load is a refusal",
    ("clawgym.app", "clawgym.search"): "gpu_layout=auto is resolved before validation",
    ("clawgym.app", "clawgym.validate"): "validation before anything starts",
    ("clawgym.app", "clawgym.trainer"): "the effective config, derived once and passed down",
    ("clawgym.commands", "clawgym.supervisor"): "clawgym explain names the health rule a key belongs to",
    ("clawgym.commands", "clawgym.app"): "resume and preflight run what train.py runs",
    ("clawgym.commands", "clawgym.cli"): "the demo runs CLI commands as a user types them",
    ("clawgym.commands", "clawgym.common"): "console, exit codes, secrets, text",
    ("clawgym.commands", "clawgym.config"): "compose, keys, provenance (explain, diff, show)",
    ("clawgym.commands", "clawgym.demo"): "the demo's checkout and stand-in trainer",
    ("clawgym.commands", "clawgym.importer"): "clawgym import",
    ("clawgym.commands", "clawgym.launch"): "clawgym jobs lists, follows and stops Ray jobs by the Jobs API",
    ("clawgym.commands", "clawgym.memory"): "clawgym layout prints GPU tables",
    ("clawgym.commands", "clawgym.pipeline"): "clawgym jobs asks the pipeline's clusters; resume launches",
    ("clawgym.commands", "clawgym.plan"): "diff and show rebuild plans",
    ("clawgym.commands", "clawgym.preflight"): "clawgym preflight",
    ("clawgym.commands", "clawgym.registry"): "clawgym flags reads the registries",
    ("clawgym.commands", "clawgym.runs"): "clawgym runs and report",
    ("clawgym.commands", "clawgym.search"): "clawgym layout",
    ("clawgym.commands", "clawgym.snapshot"): "show, diff, resume and stamp read snapshots",
    ("clawgym.commands", "clawgym.supervisor"): "resume names the last complete checkpoint and the incomplete ones",
    ("clawgym.commands", "clawgym.trainer"): "explain names the flag a key owns",
    ("clawgym.commands", "clawgym.validate"): "diff and explain validate",
    ("clawgym.demo", "clawgym.app"): "the demo's train entry is app.run over the same tree",
    ("clawgym.demo", "clawgym.config"): "the demo composes the shipped tree",
    # sweep and tuner: jobs composed, validated and handed to the pipeline
    ("hydra_plugins.clawgym_launcher", "clawgym.config"): "is this a clawgym task config",
    ("hydra_plugins.clawgym_launcher", "clawgym.sweep"): "the launcher plugin is a thin shell over the sweep",
    ("hydra_plugins.clawgym_sweeper", "clawgym.tuner"): "the sweeper plugin is a thin shell over the tuner",
    ("clawgym.sweep", "clawgym.common"): "overrides as text, console, exit codes",
    ("clawgym.sweep", "clawgym.config"): "plain configs",
    ("clawgym.sweep", "clawgym.memory"): "this node's GPU for each job's memory plan",
    ("clawgym.sweep", "clawgym.pipeline"): "every job goes through the one pipeline",
    ("clawgym.sweep", "clawgym.plan"): "each job's plan",
    ("clawgym.sweep", "clawgym.search"): "gpu_layout=auto per job",
    ("clawgym.sweep", "clawgym.snapshot"): "a job's launch record",
    ("clawgym.sweep", "clawgym.validate"): "every job validated before any starts",
    ("clawgym.sweep", "clawgym.trainer"): "each job's effective config, derived once and passed down",
    ("clawgym.tuner", "clawgym.common"): "secrets masked in the trials table",
    ("clawgym.tuner", "clawgym.config"): "is this a clawgym task config",
    ("clawgym.tuner", "clawgym.launch"): "orphaned trials followed by their Ray job",
    ("clawgym.tuner", "clawgym.pipeline"): "a trial is a pipeline job (submit, follow, stop)",
    ("clawgym.tuner", "clawgym.plan"): "where a trial's events are written",
    ("clawgym.tuner", "clawgym.runs"): "a trial's metrics read from its events",
    ("clawgym.tuner", "clawgym.snapshot"): "a trial's launch record",
    ("clawgym.tuner", "clawgym.sweep"): "trials are composed and validated as -m jobs",
    ("clawgym.tuner", "hydra_plugins.clawgym_sweeper"): "the sweeper's config node holds the defaults",
    # the pipeline: one path for every job and backend
    ("clawgym.pipeline", "clawgym.backends"): "the pipeline alone talks to backends",
    ("clawgym.pipeline", "clawgym.common"): "ownership records, console, text, atomic writes",
    ("clawgym.pipeline", "clawgym.config"): "plain configs",
    ("clawgym.pipeline", "clawgym.launch"): "Ray job handles and the signal rules",
    ("clawgym.pipeline", "clawgym.plan"): "the backend a plan asks for",
    ("clawgym.pipeline", "clawgym.preflight"): "preflight before anything starts",
    ("clawgym.pipeline", "clawgym.runs"): "progress lines and the sweep's table",
    ("clawgym.pipeline", "clawgym.search"): "the memory plan with advice",
    ("clawgym.pipeline", "clawgym.snapshot"): "snapshots written before the job starts, checkpoints watched",
    ("clawgym.pipeline", "clawgym.supervisor"): "every supervised job's supervisor started, followed and stopped",
    # supervision (below the pipeline, which starts it): its arrows join here as it imports
    # supervision: the monitors a running job is polled with
    ("clawgym.supervisor", "clawgym.common"): "stack dumps written with secrets masked",
    ("clawgym.supervisor", "clawgym.preflight"): "one checkpoint's size and the free space, as the disk check measures them",
    ("clawgym.supervisor", "clawgym.runs"): "the run's events read as clawgym runs reads them",
    ("clawgym.supervisor", "clawgym.snapshot"): "Megatron's tracker and iter_* names, read as the snapshots read them",
    ("clawgym.supervisor", "clawgym.steptime"): "stall_s derived from the longest phase",
    ("clawgym.supervisor", "clawgym.trainer"): "the effective config the step-time model reads",
    # checks and records
    ("clawgym.supervisor", "clawgym.snapshot"): "the tracker and iter_* dirs a restart resumes from",
    ("clawgym.supervisor", "clawgym.common"): "the attempts record written atomically",
    ("clawgym.supervisor", "clawgym.plan"): "the backends the recovery table is keyed by",
    ("clawgym.supervisor", "clawgym.launch"): "a Ray job's record, logs and stop, by its submission id",
    ("clawgym.supervisor", "clawgym.backends"): "the supervisor inside a SLURM allocation runs the batch job's steps "
                                                "(wait for the nodes, submit to the in-allocation head); a lost "
                                                "local head is replaced by one the supervisor owns",
    ("clawgym.supervisor", "clawgym.search"): "after an OOM, the layout search's next layout with more headroom",
    ("clawgym.preflight", "clawgym.backends"): "the ports a local head being started holds, the cluster's GPUs",
    ("clawgym.preflight", "clawgym.common"): "ownership records, ports, exit codes",
    ("clawgym.preflight", "clawgym.config"): "plain configs",
    ("clawgym.preflight", "clawgym.launch"): "the W&B key the launcher hands the job",
    ("clawgym.preflight", "clawgym.steptime"): "the modelled step time that prices the work a preemption redoes",
    ("clawgym.preflight", "clawgym.trainer"): "the effective config the step-time model reads",
    ("clawgym.preflight", "clawgym.memory"): "this node's GPUs",
    ("clawgym.preflight", "clawgym.plan"): "where the W&B key goes",
    ("clawgym.preflight", "clawgym.search"): "the memory check's advice",
    ("clawgym.runs", "clawgym.backends"): "a SLURM job's state for the runs table",
    ("clawgym.runs", "clawgym.common"): "ownership records (same SLURM cluster)",
    ("clawgym.runs", "clawgym.launch"): "a Ray job's status, quietly",
    ("clawgym.runs", "clawgym.plan"): "where a run's events are written",
    ("clawgym.runs", "clawgym.snapshot"): "runs are found by their snapshots",
    ("clawgym.importer", "clawgym.common"): "secrets masked in what the script printed",
    ("clawgym.importer", "clawgym.config"): "the imported experiment composed",
    ("clawgym.importer", "clawgym.plan"): "parity: the imported config's argv",
    ("clawgym.importer", "clawgym.registry"): "flags of the script by the registry",
    ("clawgym.importer", "clawgym.trainer"): "the flags that keys own",
    ("clawgym.importer", "clawgym.validate"): "the imported experiment validated",
    # backends, Ray jobs and snapshots
    ("clawgym.backends", "clawgym.common"): "ownership records, atomic writes, ports",
    ("clawgym.backends", "clawgym.config"): "plain configs for manifests",
    ("clawgym.backends", "clawgym.launch"): "Ray-based backends submit and follow by the Jobs API",
    ("clawgym.backends", "clawgym.plan"): "the plan and the cluster size it asks for",
    ("clawgym.backends", "clawgym.snapshot"): "SLURM's batch job reads the plan beside the snapshot",
    ("clawgym.launch", "clawgym.plan"): "a job is submitted from its plan",
    ("clawgym.snapshot", "clawgym.common"): "atomic writes, secrets masked, save-dir names",
    ("clawgym.snapshot", "clawgym.config"): "the groups a snapshot records",
    ("clawgym.snapshot", "clawgym.plan"): "the services spec's path",
    ("clawgym.snapshot", "clawgym.trainer"): "the W&B config file's variable",
    # search, translations
    ("clawgym.search", "clawgym.memory"): "every candidate's memory plan",
    ("clawgym.search", "clawgym.registry"): "the trainer's flags",
    ("clawgym.search", "clawgym.steptime"): "candidates ranked by step time",
    ("clawgym.search", "clawgym.trainer"): "values as the trainer sees them",
    ("clawgym.search", "clawgym.validate"): "candidates checked by the trainer rules",
    ("clawgym.validate", "clawgym.common"): "secret names, text",
    ("clawgym.validate", "clawgym.config"): "keys and plain configs",
    ("clawgym.validate", "clawgym.memory"): "the memory plan's GPU table",
    ("clawgym.validate", "clawgym.plan"): "the allocation and job names validated",
    ("clawgym.validate", "clawgym.registry"): "flags checked against the registry",
    ("clawgym.validate", "clawgym.trainer"): "values as the trainer sees them",
    ("clawgym.plan", "clawgym.config"): "plain configs",
    ("clawgym.plan", "clawgym.memory"): "the plan prints the memory table",
    ("clawgym.plan", "clawgym.registry"): "args rendered by the registry",
    ("clawgym.plan", "clawgym.trainer"): "the flag table, args, generated files, W&B env",
    ("clawgym.steptime", "clawgym.memory"): "GPU facts and parameter counts",
    ("clawgym.steptime", "clawgym.trainer"): "values as the trainer sees them",
    ("clawgym.memory", "clawgym.trainer"): "values as the trainer sees them",
    # base
    ("clawgym.config", "clawgym.common"): "exit codes for Hydra's refusals",
    ("clawgym.common", "clawgym.registry"): "secret option names come from the registries' data",
    ("clawgym.trainer", "clawgym.registry"): "the flag registry per trainer flavour",
}

#: What the face may not name: it reaches a cluster through the pipeline.
BACKEND_MODULES = ("clawgym.backends",)

#: Roots whose table entry is the package's own __init__ only (not a catch-all for what is under it).
EXACT_ONLY = {"clawgym"}


class Import(NamedTuple):
    source: str  # importing module
    target: str  # imported module (the deepest one of ours)
    name: Optional[str]  # the name taken from it (``from target import name``), if any
    line: int
    top: bool  # at module level (not inside a function or class body)
    typing_only: bool = False  # under `if TYPE_CHECKING:`: never run, so it closes no circle

    def where(self) -> str:
        what = f"{self.target}.{self.name}" if self.name else self.target
        return f"{self.source}:{self.line} imports {what}"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] == "launchers":
        parts = parts[1:]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _files() -> Dict[str, Path]:
    paths = sorted((ROOT / "clawgym").rglob("*.py")) + sorted((ROOT / "launchers").rglob("*.py"))
    paths.append(ROOT / "train.py")
    return {_module_name(p): p for p in paths}


MODULES = _files()


def _ours(dotted: str) -> Optional[str]:
    """The deepest module of ours that ``dotted`` names or lies under, or None."""
    while dotted:
        if dotted in MODULES:
            return dotted
        dotted = dotted.rpartition(".")[0]
    return None


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _read(module: str) -> Tuple[List[Import], Dict[str, str], ast.AST]:
    """The imports of one module, and its local names bound to modules of ours."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(), filename=str(path))
    is_pkg = path.name == "__init__.py"
    top_level = {id(n) for n in tree.body}
    # imports under `if TYPE_CHECKING:` / try at module level count as top too
    typing_only: Set[int] = set()
    for node in tree.body:
        if isinstance(node, (ast.If, ast.Try)):
            top_level.update(id(n) for n in ast.walk(node))
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            typing_only.update(id(n) for n in ast.walk(node))
    found: List[Import] = []
    aliases: Dict[str, str] = {}
    for node in ast.walk(tree):
        top = id(node) in top_level
        typing = id(node) in typing_only
        if isinstance(node, ast.Import):
            for a in node.names:
                target = _ours(a.name)
                if target is None:
                    continue
                found.append(Import(module, target, None, node.lineno, top, typing))
                if a.asname:
                    aliases[a.asname] = target
                else:
                    aliases[a.name.split(".")[0]] = a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_pkg else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for a in node.names:
                full = f"{source}.{a.name}"
                if full in MODULES:
                    found.append(Import(module, full, None, node.lineno, top, typing))
                    aliases[a.asname or a.name] = full
                    continue
                target = _ours(source)
                if target is not None:
                    found.append(Import(module, target, a.name, node.lineno, top, typing))
    return found, aliases, tree


READ = {m: _read(m) for m in MODULES}
IMPORTS: List[Import] = [imp for m in MODULES for imp in READ[m][0]]


def floor_of(module: str) -> Optional[int]:
    """Index into FLOORS (0 = top) of the longest entry naming ``module``."""
    best: Optional[Tuple[int, int]] = None
    for index, (_, entries) in enumerate(FLOORS):
        for entry in entries:
            hit = module == entry or (entry not in EXACT_ONLY and module.startswith(entry + "."))
            if hit and (best is None or len(entry) > best[1]):
                best = (index, len(entry))
    return None if best is None else best[0]


def _floor_name(index: int) -> str:
    return FLOORS[index][0]


def test_every_module_has_a_floor():
    unplaced = sorted(m for m in MODULES if floor_of(m) is None)
    assert not unplaced, (
        "modules with no floor: place each in FLOORS of tests/test_layering.py and in the "
        "'Floors' section of docs/architecture.md:\n  " + "\n  ".join(unplaced)
    )


def test_imports_go_down_the_floors_only():
    upward = []
    for imp in IMPORTS:
        here, there = floor_of(imp.source), floor_of(imp.target)
        if here is None or there is None:
            continue  # test_every_module_has_a_floor names it
        if there < here:
            upward.append(
                f"{imp.where()}  ({_floor_name(here)} reaches up to {_floor_name(there)})"
            )
    assert not upward, "imports that climb a floor (docs/architecture.md, Floors):\n  " + "\n  ".join(
        upward
    )


def _cycles(edges: Dict[str, Set[str]]) -> List[Tuple[List[str], List[str]]]:
    """Strongly connected components with more than one module (Tarjan), each with one circle."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    comps: List[List[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    paths = []
    for comp in comps:
        # one concrete circle through the component: breadth-first from its first module back to it
        members = set(comp)
        start = comp[0]
        prev: Dict[str, str] = {}
        queue = [start]
        found = None
        while queue and found is None:
            v = queue.pop(0)
            for w in sorted(edges.get(v, ())):
                if w == start:
                    found = v
                    break
                if w in members and w not in prev:
                    prev[w] = v
                    queue.append(w)
        path = [start]
        v = found
        while v is not None and v != start:
            path.insert(1, v)
            v = prev.get(v)
        paths.append((comp, path + [start]))
    return paths


def test_no_import_cycle():
    edges: Dict[str, Set[str]] = {}
    lines: Dict[Tuple[str, str], int] = {}
    for imp in IMPORTS:
        # An import under `if TYPE_CHECKING:` never runs, but a reader follows it all the same: it
        # ties the two modules as much as any other, so it counts here too.
        if imp.source != imp.target:
            edges.setdefault(imp.source, set()).add(imp.target)
            lines.setdefault((imp.source, imp.target), imp.line)
    circles = _cycles(edges)
    report = []
    for members, path in circles:
        steps = [f"{a}:{lines[(a, b)]} -> {b}" for a, b in zip(path, path[1:])]
        report.append(
            f"  {len(members)} modules tangled ({', '.join(members)}); one circle:\n    "
            + "\n    ".join(steps)
        )
    assert not circles, "import cycles among clawgym modules:\n" + "\n".join(report)


def test_no_private_name_crosses_a_module():
    crossings = []
    for imp in IMPORTS:
        if imp.source == imp.target:
            continue
        if imp.name is not None and _is_private(imp.name):
            crossings.append(imp.where())
        # a private module (`pkg._mod`) only serves its own package
        leaf = imp.target.rpartition(".")
        if _is_private(leaf[2]) and not (imp.source + ".").startswith(leaf[0] + "."):
            crossings.append(imp.where())
    for module, (_, aliases, tree) in READ.items():
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and _is_private(node.attr)):
                continue
            chain = []
            value = node.value
            while isinstance(value, ast.Attribute):
                chain.insert(0, value.attr)
                value = value.value
            if not isinstance(value, ast.Name) or value.id not in aliases:
                continue
            target = ".".join([aliases[value.id]] + chain)
            if target in MODULES and target != module:
                crossings.append(f"{module}:{node.lineno} uses {target}.{node.attr}")
    assert not crossings, (
        "private names used across modules (make the name public where it is defined):\n  "
        + "\n  ".join(sorted(set(crossings)))
    )


def test_the_face_names_no_backend():
    face = [imp for imp in IMPORTS if floor_of(imp.source) == 0]
    named = [
        imp.where()
        for imp in face
        if any(imp.target == b or imp.target.startswith(b + ".") for b in BACKEND_MODULES)
    ]
    assert not named, (
        "the face names a backend (ask the pipeline instead):\n  " + "\n  ".join(named)
    )


def test_the_table_knows_the_modules_it_checks():
    # The reader itself must see what the rules are about: the face, a backend, the launcher
    # plugin, and imports both at the top and inside functions; otherwise every check above
    # would pass on an empty list.
    assert {"train", "clawgym.app", "clawgym.backends.local", "clawgym.pipeline.pipeline"} <= set(MODULES)
    assert "hydra_plugins.clawgym_launcher._core" in MODULES
    assert any(imp.top for imp in IMPORTS) and any(not imp.top for imp in IMPORTS)
    assert floor_of("clawgym.search.anything") == floor_of("clawgym.search")
    assert floor_of("clawgym.search") < floor_of("clawgym.validate")
    assert floor_of("clawgym.search") < floor_of("clawgym.memory")
    assert floor_of("clawgym.backends.local") > floor_of("clawgym.app")
    assert floor_of("clawgym.unknown_thing") is None


def test_the_cycle_finder_reports_a_circle_and_passes_a_chain():
    # The checks above pass on today's tree; this keeps the circle finder able to fail.
    (members, path), = _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}})
    assert members == ["a", "b", "c"] and path == ["a", "b", "c", "a"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "d": {"a"}}) == []


# ---------------------------------------------------------------- packages and their arrows


def package_of(module: str) -> str:
    """The entry of LAYERS that holds ``module`` (the longest that names it), or the module itself."""
    best = ""
    for _, entries in LAYERS:
        for entry in entries:
            hit = module == entry or (entry not in EXACT_ONLY and module.startswith(entry + "."))
            if hit and len(entry) > len(best):
                best = entry
    return best or module


def _package_arrows() -> Dict[Tuple[str, str], List[Import]]:
    arrows: Dict[Tuple[str, str], List[Import]] = {}
    for imp in IMPORTS:
        a, b = package_of(imp.source), package_of(imp.target)
        if a != b and not imp.typing_only:
            arrows.setdefault((a, b), []).append(imp)
    return arrows


def test_every_import_between_packages_is_an_allowed_arrow():
    unknown = [
        f"{a} -> {b}: {imps[0].where()}" + (f" (and {len(imps) - 1} more)" if len(imps) > 1 else "")
        for (a, b), imps in sorted(_package_arrows().items())
        if (a, b) not in ARROWS
    ]
    assert not unknown, (
        "imports between packages that ARROWS (tests/test_layering.py) does not allow; add the arrow "
        "with its reason if the house should have it, or import through what is allowed:\n  "
        + "\n  ".join(unknown)
    )


def test_every_allowed_arrow_goes_down_and_is_drawn():
    upward = [f"{a} -> {b}" for a, b in ARROWS if floor_of(a) is None or floor_of(b) is None
              or floor_of(b) < floor_of(a)]
    assert not upward, "ARROWS that climb a layer or name no layer:\n  " + "\n  ".join(upward)
    drawn = _package_arrows()
    stale = sorted(f"{a} -> {b}" for a, b in ARROWS if (a, b) not in drawn)
    assert not stale, "ARROWS that no import draws any more (remove them):\n  " + "\n  ".join(stale)
    missing_reason = [f"{a} -> {b}" for (a, b), why in ARROWS.items() if not why.strip()]
    assert not missing_reason, "ARROWS without a reason:\n  " + "\n  ".join(missing_reason)


def test_the_package_root_holds_only_the_entry_points():
    root = {m for m, path in MODULES.items() if m.startswith("clawgym") and path.parent == ROOT / "clawgym"}
    extra = sorted(root - ROOT_MODULES)
    assert not extra, (
        "modules at the package root that no layer names (move each into the package of its layer, "
        "docs/architecture.md):\n  " + "\n  ".join(extra)
    )
    assert len(ROOT_MODULES) <= 8


def test_every_package_has_a_layer_and_a_place_in_the_map():
    packages = sorted(f"clawgym.{p.name}" for p in (ROOT / "clawgym").iterdir()
                      if p.is_dir() and (p / "__init__.py").is_file())
    placed = {e for _, entries in LAYERS for e in entries}
    unplaced = [p for p in packages if p not in placed]
    assert not unplaced, "packages that no layer names (LAYERS, tests/test_layering.py):\n  " + "\n  ".join(unplaced)
    text = (ROOT / "docs" / "architecture.md").read_text()
    unmapped = [p for p in packages if f"{p.split('.')[1]}/" not in text]
    assert not unmapped, "packages docs/architecture.md does not name (as `name/`):\n  " + "\n  ".join(unmapped)


def test_the_arrow_table_can_fail():
    # An import the table does not allow is reported; a module at the root is reported.
    fake = Import("clawgym.memory.params", "clawgym.pipeline.core", None, 1, True)
    assert (package_of(fake.source), package_of(fake.target)) not in ARROWS
    assert package_of("clawgym.pipeline.core") == "clawgym.pipeline"
    assert package_of("clawgym.new_root_module") == "clawgym.new_root_module"
    assert "clawgym.new_root_module" not in ROOT_MODULES


def test_the_map_draws_the_arrow_table():
    # docs/architecture.md's picture is generated from LAYERS and ARROWS: it must be the current one.
    import subprocess
    import sys

    run = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_architecture.py"), "--check"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
