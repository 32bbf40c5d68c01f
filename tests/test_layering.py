"""The house has one direction: imports read with ``ast`` hold the floors of docs/architecture.md.

Every import in clawgym/, train.py and launchers/ is read (at the top of a module and inside
functions; ``from x import y`` resolved to the module ``x.y`` when that is a module, relative imports
resolved against the importing package) and held against four rules:

- a module imports its own floor or lower floors, never a higher one (``FLOORS`` below is the table
  docs/architecture.md states; a module missing from it fails until it is placed);
- no import cycle among clawgym modules (every import counts, also one inside a function: Python
  runs it all the same, only later);
- no private name (``_x``) of another module imported or reached as ``module._x``;
- the face names no backend (``clawgym.backends*``, ``clawgym.backends.ray_head``): it asks the pipeline.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Set, Tuple

ROOT = Path(__file__).resolve().parents[1]

#: Floors from the top down (docs/architecture.md, "Floors"). An entry names a module or a package
#: (the package and everything under it); the bare ``clawgym`` entry is the package's own __init__.
#: Entries for modules that do not exist yet (search, steptime, tuner, the sweeper plugin) are here
#: on purpose, so they land on their floor when they are merged.
FLOORS: List[Tuple[str, Tuple[str, ...]]] = [
    (
        "face",
        ("train", "clawgym.cli", "clawgym.__main__", "clawgym.commands", "clawgym.app", "clawgym.demo"),
    ),
    (
        "sweep/tuner",
        (
            "clawgym.sweep.core",
            "clawgym.tuner",
            "hydra_plugins.clawgym_launcher",
            "hydra_plugins.clawgym_sweeper",
        ),
    ),
    ("pipeline", ("clawgym.pipeline",)),
    (
        "backends",
        (
            "clawgym.backends",
            "clawgym.preflight",
            "clawgym.snapshot",
            "clawgym.launch.rayjob",
            "clawgym.backends.ray_head",
            "clawgym.runs",
            "clawgym.importer",
        ),
    ),
    ("search", ("clawgym.search",)),
    (
        "translations",
        ("clawgym.plan.build", "clawgym.plan.allocation", "clawgym.validate", "clawgym.memory", "clawgym.steptime"),
    ),
    (
        "base",
        (
            "clawgym",
            "clawgym.config.compose",
            "clawgym.config.schema",
            "clawgym.config.schema_cache",
            "clawgym.config.hydra_mode",
            "clawgym.registry",
            "clawgym.common.secrets",
            "clawgym.trainer.effective",
            "clawgym.trainer.flagmap",
            "clawgym.trainer.generated",
            "clawgym.trainer.args",
            "clawgym.trainer.wandb_env",
            "clawgym.common.savedir",
            "clawgym.jobside",
            "clawgym.common.fsutil",
            "clawgym.common.text",
            "clawgym.common.console",
            "clawgym.common.overrides",
            "clawgym.common.ownership",
            "clawgym.common.exit_codes",
            "clawgym.config.keys",
            "clawgym.config.provenance",
        ),
    ),
]

#: What the face may not name: it reaches a cluster through the pipeline.
BACKEND_MODULES = ("clawgym.backends", "clawgym.backends.ray_head")

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
        if imp.source != imp.target and not imp.typing_only:
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
    assert floor_of("clawgym.search.layout") == floor_of("clawgym.search")
    assert floor_of("clawgym.search") < floor_of("clawgym.validate")
    assert floor_of("clawgym.search") < floor_of("clawgym.memory")
    assert floor_of("clawgym.backends.local") > floor_of("clawgym.app")
    assert floor_of("clawgym.unknown_thing") is None


def test_the_cycle_finder_reports_a_circle_and_passes_a_chain():
    # The checks above pass on today's tree; this keeps the circle finder able to fail.
    (members, path), = _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}})
    assert members == ["a", "b", "c"] and path == ["a", "b", "c", "a"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "d": {"a"}}) == []
