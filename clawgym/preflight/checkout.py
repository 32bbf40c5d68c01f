"""Checkout checks: trainer scripts and Megatron-LM, task folders, custom hook modules.

Nothing here imports the user's code: hook modules are found as files on the job's
PYTHONPATH and their attribute looked up with ``ast``.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

from clawgym.preflight.core import CheckFailed, Context, NotApplicable

#: How many offending task entries an error lists.
SHOW = 3


def check_checkout(ctx: Context) -> str:
    """The trainer script the plan runs exists in its working dir, and Megatron-LM exists."""
    c, plan = ctx.c, ctx.plan
    slime = Path(plan.working_dir)
    script = plan.entrypoint[1]
    root_hint = "set paths.root to the ClawGym-RL checkout (ClawGym-Agents/RL) or export CLAWGYM_RL_ROOT"
    if not slime.is_dir():
        raise CheckFailed(f"paths.slime={slime} does not exist (the job's working dir)",
                          f"{root_hint}, or set paths.slime to the slime checkout")
    if not (slime / script).is_file():
        raise CheckFailed(
            f"gpu_layout.trainer_script={script} is not in paths.slime={slime}",
            f"check paths.slime points at slime's checkout (it has train.py and train_async.py); {root_hint}")
    megatron = Path(c["paths"]["megatron"])
    if not megatron.is_dir():
        raise CheckFailed(f"paths.megatron={megatron} does not exist (first entry of the job's PYTHONPATH)",
                          f"{root_hint}, or set paths.megatron to the Megatron-LM checkout")
    return f"{slime / script}; Megatron-LM at {megatron}"


def scan_tasks(folder: Path) -> Tuple[int, List[str]]:
    """(tasks, problems) of one dataset folder, by the rules ClawGym-RL's rollout loads it with.

    A task is a sub-directory holding ``data_entry.json`` (a JSON object with task_id,
    user_query and metadata) and ``reward/reward.sh``. The rollout refuses the whole
    folder if any entry is something else, so every entry must be a task.
    """
    count, problems = 0, []
    for child in sorted(folder.iterdir()):
        if not child.is_dir():
            problems.append(f"{child.name} is a file, not a task folder")
            continue
        entry = child / "data_entry.json"
        if not entry.is_file():
            problems.append(f"{child.name}/ has no data_entry.json")
            continue
        try:
            data = json.loads(entry.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            problems.append(f"{child.name}/data_entry.json is not valid JSON ({exc})")
            continue
        missing = [k for k in ("task_id", "user_query", "metadata") if not isinstance(data, dict) or k not in data]
        if missing:
            problems.append(f"{child.name}/data_entry.json lacks {', '.join(missing)}")
            continue
        if not (child / "reward" / "reward.sh").is_file():
            problems.append(f"{child.name}/ has no reward/reward.sh")
            continue
        count += 1
    return count, problems


def check_tasks(ctx: Context) -> str:
    """The train (and, with periodic eval, the eval) task folders exist and hold tasks."""
    c = ctx.c
    folders: List[Tuple[str, str]] = [("paths.train_tasks", c["paths"]["train_tasks"])]
    if c["eval"]["interval"] is not None:
        folders.append(("paths.eval_tasks", c["paths"]["eval_tasks"]))
    counts = []
    for key, value in folders:
        total = 0
        # The rollout takes a comma-separated list of dataset folders.
        for raw in str(value).split(","):
            folder = Path(raw.strip())
            if not folder.is_dir():
                raise CheckFailed(f"{key}={value}: {folder} does not exist or is not a folder",
                                  f"set {key} to a ClawGym task folder (e.g. <checkout>/data/clawgym_train), "
                                  "or set paths.root to the ClawGym-RL checkout")
            count, problems = scan_tasks(folder)
            if problems:
                more = f" (and {len(problems) - SHOW} more)" if len(problems) > SHOW else ""
                raise CheckFailed(
                    f"{key}={value}: {folder} holds entries the rollout rejects: "
                    + "; ".join(problems[:SHOW]) + more,
                    "every entry must be a task folder with data_entry.json and reward/reward.sh "
                    "(see ClawGym-RL's data/DATASET_README.md); move other files out")
            if count == 0:
                raise CheckFailed(f"{key}={value}: {folder} holds no tasks",
                                  f"point {key} at a folder of task_*/ directories")
            total += count
        counts.append(f"{key.split('.')[1].replace('_tasks', '')} {total} tasks")
    if c["eval"]["interval"] is None:
        counts.append("eval folder not needed (eval.interval=null)")
    return ", ".join(counts)


def find_module(module: str, search: List[str]) -> Optional[Path]:
    """The file that ``import module`` would load from ``search`` (no import), or None."""
    parts = module.split(".")
    for base in search:
        if not base:
            continue
        here = Path(base)
        for pkg in parts[:-1]:
            here = here / pkg
        if not here.is_dir():
            continue
        leaf = parts[-1]
        if (here / f"{leaf}.py").is_file():
            return here / f"{leaf}.py"
        if (here / leaf / "__init__.py").is_file():
            return here / leaf / "__init__.py"
        compiled = sorted(here.glob(f"{leaf}.*.so")) + sorted(here.glob(f"{leaf}.so"))
        if compiled:
            return compiled[0]
        if (here / leaf).is_dir():
            # A namespace package: importable, but it defines nothing itself.
            return here / leaf
    return None


def defines(path: Path, attr: str) -> Optional[bool]:
    """Whether a module file binds ``attr`` at top level; None when that cannot be told."""
    if path.suffix != ".py":
        return None
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (SyntaxError, UnicodeDecodeError, OSError, ValueError):
        return None

    def names(nodes: List[ast.stmt]) -> List[str]:
        out: List[str] = []
        for node in nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.append(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    out += [n.id for n in ast.walk(t) if isinstance(n, ast.Name)]
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    if alias.name == "*":
                        return ["*"]
                    out.append(alias.asname or alias.name.split(".")[0])
            elif isinstance(node, (ast.If, ast.Try)):
                body = list(node.body) + list(getattr(node, "orelse", []))
                for h in getattr(node, "handlers", []):
                    body += h.body
                out += names(body + list(getattr(node, "finalbody", [])))
        return out

    found = names(tree.body)
    return None if "*" in found else attr in found


#: Trainer flags whose value is a ``module.attr`` slime imports (load_function), in slime's
#: arguments.py from v0.2.2 to v0.3.1 and the ClawGym fork. Config-file paths
#: (--custom-config-path, --megatron-config-path, --eval-config) are not among them.
FUNCTION_PATH_FLAGS = (
    "--rollout-function-path", "--eval-function-path", "--custom-generate-function-path", "--custom-rm-path",
    "--custom-reward-post-process-path", "--dynamic-sampling-filter-path", "--buffer-filter-path",
    "--rollout-data-postprocess-path", "--rollout-sample-filter-path", "--rollout-all-samples-process-path",
    "--rollout-sample-hook-path", "--custom-rollout-log-function-path", "--custom-eval-rollout-log-function-path",
    "--custom-convert-samples-to-train-data-path", "--custom-loss-function-path",
    "--custom-advantage-function-path", "--custom-tis-function-path", "--custom-pg-loss-reducer-function-path",
    "--custom-model-provider-path", "--custom-megatron-init-path", "--custom-megatron-before-log-prob-hook-path",
    "--custom-megatron-before-train-step-hook-path", "--custom-update-weight-post-write-path",
    "--data-source-path",
)

#: The curated key that emits a function-path flag (named in messages when it set the value).
FUNCTION_KEYS = {
    "--rollout-function-path": "rollout.function_path",
    "--eval-function-path": "eval.function_path",
    "--custom-generate-function-path": "rollout.generate_function_path",
    "--custom-rm-path": "rollout.reward_function_path",
}


def _source(c: Mapping[str, Any], flag: str, value: str) -> str:
    """How a message names a function path: its config key when that key set it, else the flag."""
    key = FUNCTION_KEYS.get(flag)
    if key is not None:
        group, name = key.split(".")
        if c[group][name] == value:
            return key
    return flag


def check_functions(ctx: Context) -> str:
    """Every custom function path in the trainer's flags is a module.attr on the job's PYTHONPATH.

    Read from the plan's argv, so a hook set by a config key, ``args.*`` or ``extra_args``
    is checked alike (the last occurrence of a flag wins, as in argparse).
    """
    from clawgym.preflight.data import plan_flags

    c, plan = ctx.c, ctx.plan
    env = plan.runtime_env.get("env_vars", {})
    # The job runs ``python3 <script>`` in the working dir, so that dir is on sys.path too.
    search = [p for p in env.get("PYTHONPATH", "").split(":") if p] + [plan.working_dir]
    flags = plan_flags(plan)
    targets: List[Tuple[str, str]] = []
    for flag in FUNCTION_PATH_FLAGS:
        values = flags.get(flag)
        if values:
            targets.append((_source(c, flag, values[-1]), values[-1]))
    spec = flags.get("--spec")
    if spec and len(spec) == 2:
        # A model's layer spec (slime_plugins.models...): the plugin must exist in this slime checkout.
        source = "model.spec" if list(c["model"].get("spec") or []) == spec else "--spec"
        targets.append((source, ".".join(spec)))
    checked: Dict[str, str] = {}
    for key, target in targets:
        if target in checked:
            continue
        module, _, attr = target.rpartition(".")
        if not module or not attr:
            raise CheckFailed(f"{key}={target} is not of the form module.function",
                              f"set {key} to e.g. my_package.my_module.my_function")
        path = find_module(module, search)
        if path is None:
            raise CheckFailed(
                f"{key}={target}: module {module} is not on the job's PYTHONPATH ({':'.join(search)})",
                f"fix {key}, or put {module.replace('.', '/')}.py under paths.root (the ClawGym-RL checkout), "
                "or add its folder to the job's PYTHONPATH (extra_env)")
        has = defines(path, attr)
        if has is False:
            raise CheckFailed(f"{key}={target}: {path} defines no top-level {attr}",
                              f"fix the function name in {key} (or add def {attr}(...) to {path})")
        checked[target] = str(path)
    if not checked:
        raise NotApplicable("no custom function path in the trainer's flags")
    return ", ".join(checked) + " found"
