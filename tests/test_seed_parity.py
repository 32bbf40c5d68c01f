"""Parity with the seed launch script, run for real.

The seed (``../shared/seed/run_qwen3_4b.sh``) is copied into a fixture checkout and run
with bash. Its PATH holds only the stand-ins of ``tests/seed_standins`` (``ray``,
``pkill``, ``docker``, ``sleep``: ``clawgym import``'s recorder, which records argv and
environment and runs nothing)
plus a few harmless coreutils, so the real ``pkill``/``ray stop``/``docker rm`` are
unreachable. What the stand-ins recorded is compared with clawgym's plan for
``paths.root=<fixture checkout>``: the trainer's effective flags (argparse semantics),
trainer script, working dir, PYTHONPATH, the environment the job sees, and the head.

``MIGRATION`` below is the one table of every environment variable the seed reads and
the override that replaces it. The parity matrix runs from it, and docs/migration.md
must show exactly it (``test_migration_doc_matches_table``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

import pytest

from tests.conftest import ROOT, SHARED

from clawgym.importer.capture import RECORDER  # noqa: E402

SEED = SHARED / "seed" / "run_qwen3_4b.sh"
STANDINS = ROOT / "tests" / "seed_standins"
MIGRATION_DOC = ROOT / "docs" / "migration.md"
TIMESTAMP = "20260101_000000"
# Placeholders of secret values: must never show up in a plan.
WANDB_SECRET = "wandb-secret-0123456789abcdef"
SGLANG_SECRET = "sglang-secret-fedcba9876543210"

pytestmark = pytest.mark.skipif(
    not SEED.is_file(),
    reason=f"seed script {SEED} not found: the shared reference folder (../shared, or $CLAWGYM_SHARED) "
    "is absent outside the team workplace, so there is nothing to compare with",
)


@dataclass(frozen=True)
class EnvRow:
    """One environment variable the seed reads and what replaces it in clawgym."""

    # The variable.
    var: str
    # Value the parity matrix runs with ("{root}" = fixture checkout); None: not run alone.
    sample: Optional[str]
    # clawgym overrides replacing it; "{v}" stands for the variable's value.
    overrides: Tuple[str, ...]
    # Migration notes (Markdown, one line).
    notes: str
    # Variables the row needs to have any effect (e.g. a W&B key for WANDB_PROJECT).
    with_env: Tuple[Tuple[str, str], ...] = ()
    # For switch-like variables: the value the overrides stand for; any other value is the
    # default (no override), e.g. USE_WANDB=1.
    when: Optional[str] = None


MIGRATION: List[EnvRow] = [
    EnvRow("NUM_GPUS", "16", ("gpu_layout.num_gpus={v}",),
           "Also `ray start --num-gpus` (`ray.num_gpus` follows it)."),
    EnvRow("ACTOR_GPUS", "2", ("gpu_layout.actor_gpus={v}",),
           "`perf.tensor_parallel` follows it, as in the seed."),
    EnvRow("ROLLOUT_GPUS", "2", ("gpu_layout.rollout_gpus={v}",), ""),
    EnvRow("USE_COLOCATE", "1", ("gpu_layout=colocate_8",),
           "Any `NUM_GPUS`: add `gpu_layout.num_gpus=$NUM_GPUS` (actor and rollout GPUs follow it; "
           "`gpu_layout=colocate_4` exists). The seed turns colocation on for *any* non-empty value, "
           "`USE_COLOCATE=0` included; see deliberate differences.",
           when="1"),
    EnvRow("EXP_NAME", "my-exp", ("exp_name={v}",),
           "Drives the save dir, the W&B group and (via `run_name`) the submission id."),
    EnvRow("HF_CKPT", "{root}/local/models/other-ckpt", ("paths.hf_checkpoint={v}",),
           "`paths.ref_load` follows it unless set."),
    EnvRow("REF_LOAD", "{root}/local/models/ref-ckpt", ("paths.ref_load={v}",), ""),
    EnvRow("SAVE_CKPT", "{root}/elsewhere/save", ("paths.save={v}",),
           "Logs go to `<paths.save>/logs/train_<timestamp>.log` as in the seed."),
    EnvRow("SAVE_INTERVAL", "10", ("checkpoint.save_interval={v}",), ""),
    EnvRow("PORT", "31001", ("sglang.api_port={v}",), "The ClawGymRL API server port (job env `PORT`)."),
    EnvRow("OPENCLAW_RECORD_ENABLED", "1", ("sglang.record=true",),
           "Record file: `paths.record_file`.",
           when="1"),
    EnvRow("TOOL_CALL_PARSER", "hermes", ("sglang.tool_call_parser={v}",),
           "Both the SGLang flag and the job env."),
    EnvRow("REASONING_PARSER", "qwen3", ("sglang.reasoning_parser={v}",),
           "Both the SGLang flag and the job env."),
    EnvRow("OPENCLAW_EVAL_MAX_TURNS", "3", ("eval.max_turns={v}",), ""),
    EnvRow("OPENCLAW_TRAIN_MAX_TURNS", "2", ("rollout.train_max_turns={v}",), ""),
    EnvRow("OPENCLAW_EVAL_NUM_WORKERS", "8", ("eval.num_workers={v}",), ""),
    EnvRow("OPENCLAW_TRAIN_NUM_WORKERS", "16", ("rollout.train_num_workers={v}",), ""),
    EnvRow("OPENCLAW_CONTEXT_WINDOW", "32768", ("rollout.max_context_len={v}",),
           "`sglang.context_length` and the job's `OPENCLAW_CONTEXT_WINDOW` follow it."),
    EnvRow("OPENCLAW_MAX_TOKENS", "4096", ("rollout.max_response_len={v}",),
           "The job's `OPENCLAW_MAX_TOKENS` follows it."),
    EnvRow("ROLLOUT_BATCH_SIZE", "16", ("rollout.batch_size={v}",), ""),
    EnvRow("OPENCLAW_EVAL_INTERVAL", "10", ("eval.interval={v}",), "`eval.interval=null` turns eval off."),
    EnvRow("SKIP_INITIAL_EVAL", "1", ("eval.skip_before_train=true",),
           "The seed skips for *any* non-empty value, `0` included; see deliberate differences.",
           when="1"),
    EnvRow("SGLANG_TP", "2", ("sglang.tp={v}",), ""),
    EnvRow("USE_WANDB", "0", ("wandb.enabled=false",),
           "Default (`wandb.enabled=null`) = the seed's `USE_WANDB=1`: on when a key is in the environment.",
           with_env=(("WANDB_KEY", WANDB_SECRET),),
           when="0"),
    EnvRow("WANDB_PROJECT", "my-project", ("wandb.project={v}",), "",
           with_env=(("WANDB_KEY", WANDB_SECRET),)),
    EnvRow("WANDB_KEY", WANDB_SECRET, (),
           "Keep it in the environment: read at launch, passed to the job as `WANDB_API_KEY`, never in "
           "argv (the seed passes `--wandb-key`). Turns W&B on, as in the seed."),
    EnvRow("WANDB_API_KEY", WANDB_SECRET, (),
           "As `WANDB_KEY` (which wins when both are set). Names: `wandb.key_env`."),
    EnvRow("OPENCLAW_EVAL_TASKS", "/data/clawgym_eval_v2", ("paths.eval_tasks={v}",), ""),
    EnvRow("OPENCLAW_TRAIN_TASKS", "/data/clawgym_train_v2", ("paths.train_tasks={v}",), ""),
    EnvRow("OPENCLAW_EVAL_N_SAMPLES", "4", ("eval.n_samples={v}",), ""),
    EnvRow("OPENCLAW_ROOTFS", "/srv/rootfs", ("sandbox=chroot", "sandbox.rootfs={v}"),
           "A rootfs switches the rollout to chroot; the docker leftover cleanup is then skipped, as in the seed."),
    EnvRow("OPENCLAW_GATEWAY_IMAGE", "clawgym-rl:v0.2", ("sandbox.image={v}",), ""),
    EnvRow("MASTER_ADDR", "10.0.0.5", ("ray.node_ip={v}",),
           "Head node IP, job `MASTER_ADDR` and `no_proxy`."),
    EnvRow("SGLANG_API_KEY", SGLANG_SECRET, (),
           "Keep it in the environment: read at launch, never stored in the plan, snapshots or Ray job metadata."),
]

ROWS: Dict[str, EnvRow] = {row.var: row for row in MIGRATION}

# Names the seed's text refers to that are not environment input: bash's own array,
# and the MODEL_ARGS array defined by the model script the seed sources.
NOT_ENV_INPUT = {"BASH_SOURCE", "MODEL_ARGS"}
# Variables bash itself sets for its children; not something the seed exports.
SHELL_OWN = {"_", "SHLVL", "PWD", "OLDPWD"}
# Small tools the seed runs besides the stand-ins; nothing else is on its PATH.
HARMLESS_TOOLS = ("dirname", "date", "mkdir", "tee")

# The Qwen3-4B model script of slime (scripts/models/qwen3-4B.sh): a MODEL_ARGS array.
QWEN3_4B_MODEL_SCRIPT = """\
# Written by tests/test_seed_parity.py: the flags of slime's scripts/models/qwen3-4B.sh.
MODEL_ARGS=(
   --swiglu
   --num-layers 36
   --hidden-size 2560
   --ffn-hidden-size 9728
   --num-attention-heads 32
   --group-query-attention
   --num-query-groups 8
   --use-rotary-position-embeddings
   --disable-bias-linear
   --normalization "RMSNorm"
   --norm-epsilon 1e-6
   --rotary-base "${MODEL_ARGS_ROTARY_BASE:-1000000}"
   --vocab-size 151936
   --kv-channels 128
   --qk-layernorm
)
"""


# ---------------------------------------------------------------- helpers

def seed_env_reads(text: str) -> set:
    """Environment variables a bash script reads.

    Every ``$VAR`` / ``${VAR...`` reference, minus variables the script assigns without
    reading them first (``SLIME_ROOT=...``); ``X=${X:-default}`` still reads ``X``.
    """
    refs = set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", text))
    assigned: Dict[str, bool] = {}
    for name, rhs in re.findall(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$", text, re.M):
        self_ref = re.search(r"\$\{?" + re.escape(name) + r"\b", rhs) is not None
        assigned[name] = assigned.get(name, False) or self_ref
    internal = {name for name, reads_itself in assigned.items() if not reads_itself}
    return refs - internal - NOT_ENV_INPUT


def seed_exports(text: str) -> set:
    """Names the seed exports (``export NAME=...``)."""
    return set(re.findall(r"^\s*export\s+([A-Za-z_][A-Za-z0-9_]*)=", text, re.M))


def effective_flags(args: List[str]) -> Dict[str, Any]:
    """Flags as argparse sees them: ``--flag value`` or ``--flag=value``; the last value wins."""
    out: Dict[str, Any] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        assert arg.startswith("--"), f"stray argument {arg!r} in {args}"
        if "=" in arg:
            key, value = arg.split("=", 1)
            out[key] = value
            i += 1
        elif i + 1 < len(args) and not args[i + 1].startswith("--"):
            out[arg] = args[i + 1]
            i += 2
        else:
            out[arg] = True
            i += 1
    return out


def flag_counts(args: List[str]) -> Dict[str, int]:
    counts: Dict[str, int] = {}
    for arg in args:
        if arg.startswith("--"):
            counts[arg.split("=", 1)[0]] = counts.get(arg.split("=", 1)[0], 0) + 1
    return counts


def comparable(value: Any) -> Any:
    """Numbers compare numerically (1e-6 == 1e-06, 0.00 == 0.0); everything else as is."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def normalized(flags: Mapping[str, Any]) -> Dict[str, Any]:
    return {k: comparable(v) for k, v in flags.items()}


def norm_path(path: str) -> str:
    return os.path.normpath(os.path.realpath(path))


def norm_pythonpath(value: str) -> List[str]:
    return [norm_path(p) for p in value.split(":") if p]


def norm_no_proxy(env: Dict[str, str]) -> None:
    """Deliberate: clawgym names each no_proxy host once (the seed writes ``127.0.0.1,$HEAD_IP``, twice
    the same host for a loopback head); the same hosts either way."""
    if "no_proxy" in env:
        env["no_proxy"] = ",".join(dict.fromkeys(env["no_proxy"].split(",")))


def overrides_for(env: Mapping[str, str], root: Path) -> List[str]:
    """clawgym overrides replacing a seed environment, from the migration table."""
    out: List[str] = []
    for var, value in env.items():
        row = ROWS.get(var)
        if row is not None and (row.when is None or value == row.when):
            out += [o.format(v=value) for o in row.overrides]
    return out


def render_table() -> str:
    """The migration table as docs/migration.md shows it."""
    lines = ["| environment variable | clawgym override | notes |", "|---|---|---|"]
    for row in MIGRATION:
        over = " ".join(f"`{o.format(v='$' + row.var)}`" for o in row.overrides) or \
            "none (read from the environment at launch)"
        if row.when is not None:
            over += f" for `{row.var}={row.when}`"
        lines.append(f"| `{row.var}` | {over} | {row.notes} |")
    return "\n".join(lines)


# ---------------------------------------------------------------- running the seed

@dataclass
class SeedRun:
    """What the seed did, as recorded by the stand-ins."""

    # Environment the test gave bash.
    given_env: Dict[str, str]
    returncode: int
    output: str
    calls: List[Dict[str, Any]] = field(default_factory=list)

    def calls_of(self, tool: str) -> List[Dict[str, Any]]:
        return [c for c in self.calls if c["tool"] == tool]

    @property
    def ray_start(self) -> Dict[str, Any]:
        (start,) = [c for c in self.calls_of("ray") if c["argv"][:1] == ["start"]]
        return start

    @property
    def submit(self) -> Dict[str, Any]:
        (sub,) = [c for c in self.calls_of("ray") if c["argv"][:2] == ["job", "submit"]]
        return sub

    def submit_options(self) -> Dict[str, Any]:
        argv = self.submit["argv"][2:]
        return effective_flags(argv[: argv.index("--")])

    @property
    def entrypoint(self) -> List[str]:
        argv = self.submit["argv"]
        return argv[argv.index("--") + 1:]

    def job_env(self, exported: set) -> Dict[str, str]:
        """Environment the seed's job sees: what it exported before ``ray start`` (the
        head's environment reaches the job) overlaid with the runtime env's env_vars.

        Exported = every variable of the ``ray start`` environment that the test did not
        give bash (or gave with another value), plus the ones the seed exports by name
        (an export that keeps the given value is still the seed's).
        """
        head_env = self.ray_start["env"]
        mine = {k: v for k, v in head_env.items()
                if (k not in self.given_env or self.given_env[k] != v or k in exported) and k not in SHELL_OWN}
        runtime_env = json.loads(self.submit_options()["--runtime-env-json"])
        return {**mine, **runtime_env["env_vars"]}


@pytest.fixture(scope="module")
def seed_checkout(tmp_path_factory) -> Path:
    """A fixture ClawGym-RL checkout holding a copy of the seed, the model script it
    sources, the HF checkpoint folder it checks, and a PATH of stand-ins only."""
    root = Path(os.path.realpath(tmp_path_factory.mktemp("seed_checkout")))
    shutil.copy(SEED, root / SEED.name)
    models = root / "slime" / "scripts" / "models"
    models.mkdir(parents=True)
    (models / "qwen3-4B.sh").write_text(QWEN3_4B_MODEL_SCRIPT)
    for ckpt in ("Qwen3-4B-Instruct-2507", "other-ckpt"):
        (root / "local" / "models" / ckpt).mkdir(parents=True)
    standins = root / ".standins"
    shutil.copytree(STANDINS, standins)
    for tool in standins.iterdir():
        tool.chmod(tool.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    tools = root / ".tools"
    tools.mkdir()
    for name in HARMLESS_TOOLS:
        real = shutil.which(name)
        assert real, f"{name} is needed by the seed and missing on this machine"
        (tools / name).symlink_to(real)
    return root


def seed_path(root: Path) -> str:
    return f"{root / '.standins'}:{root / '.tools'}"


def run_seed(root: Path, env: Mapping[str, str], tmp_path: Path) -> SeedRun:
    log = tmp_path / "standin_calls.jsonl"
    log.unlink(missing_ok=True)
    given = {
        "PATH": seed_path(root),
        "HOME": str(tmp_path),
        "LANG": "C.UTF-8",
        # The stand-ins are clawgym import's recorder (one mechanism for both).
        "CLAWGYM_IMPORT_LOG": str(log),
        "CLAWGYM_IMPORT_PY": sys.executable,
        "CLAWGYM_IMPORT_RECORDER": str(RECORDER),
        **{k: v.format(root=root) for k, v in env.items()},
    }
    bash = shutil.which("bash")
    assert bash, "bash is needed to run the seed"
    proc = subprocess.run([bash, str(root / SEED.name)], env=given, cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return SeedRun(given, proc.returncode, proc.stdout + proc.stderr, calls)


def our_plan(root: Path, overrides: List[str], environ: Mapping[str, str]):
    from clawgym.config.compose import compose
    from clawgym.plan.build import build_plan
    from clawgym.validate import violations

    cfg = compose([f"paths.root={root}", *overrides])
    assert violations(cfg) == [], [v.format() for v in violations(cfg)]
    return cfg, build_plan(cfg, environ=dict(environ), timestamp=TIMESTAMP)


def assert_parity(seed: SeedRun, cfg, plan, environ: Mapping[str, str], exported: set) -> None:
    """Same effective trainer flags, script, working dir, PYTHONPATH, job environment and head,
    up to the deliberate differences (each asserted here, never silently skipped)."""
    from clawgym.config.compose import to_plain
    from clawgym.plan.build import format_plan
    from clawgym.trainer.wandb_env import wandb_job_env

    c = to_plain(cfg)
    assert seed.returncode == 0, seed.output[-3000:]
    assert "command not found" not in seed.output, seed.output[-3000:]

    # Trainer: interpreter and script.
    assert plan.entrypoint[:2] == seed.entrypoint[:2]
    seed_args, our_args = seed.entrypoint[2:], plan.entrypoint[2:]
    # We emit every flag once; the seed repeats --rotary-base (model script, then CKPT_ARGS).
    assert all(n == 1 for n in flag_counts(our_args).values()), flag_counts(our_args)
    assert flag_counts(seed_args)["--rotary-base"] == 2
    seed_flags, our_flags = effective_flags(seed_args), effective_flags(our_args)
    # Deliberate: the seed puts the W&B key in argv; we pass it through the environment only.
    key = environ.get("WANDB_KEY") or environ.get("WANDB_API_KEY")
    if "--wandb-key" in seed_flags:
        assert seed_flags.pop("--wandb-key") == key
    assert "--wandb-key" not in our_flags
    # Deliberate: metrics are kept in the save dir (metrics.tensorboard, default on); the seed keeps none.
    assert "--use-tensorboard" not in seed_flags
    assert our_flags.pop("--use-tensorboard", False) is c["metrics"]["tensorboard"]
    assert normalized(our_flags) == normalized(seed_flags)

    # Working dir and PYTHONPATH.
    submit = seed.submit_options()
    assert norm_path(plan.working_dir) == norm_path(submit["--working-dir"])
    seed_job, our_job = seed.job_env(exported), dict(plan.runtime_env["env_vars"])
    assert norm_pythonpath(our_job.pop("PYTHONPATH")) == norm_pythonpath(seed_job.pop("PYTHONPATH"))
    assert plan.address == submit["--address"]

    # Job environment. Ours: runtime env, plus the local head's environment.
    assert plan.ray_start is not None
    ours = {**plan.ray_start_env, **our_job}
    # Deliberate: the API server binds loopback unless sglang.api_host says otherwise.
    assert seed_job.pop("HOST") == "0.0.0.0"
    assert ours.pop("HOST") == c["sglang"]["api_host"]
    # Deliberate: secrets are named in the plan and read at launch, never stored.
    assert seed_job.pop("SGLANG_API_KEY") == environ.get("SGLANG_API_KEY", "")
    assert "SGLANG_API_KEY" not in ours and plan.secret_env["SGLANG_API_KEY"] == ["SGLANG_API_KEY"]
    if key:
        assert plan.secret_env.get("WANDB_API_KEY") == ["WANDB_KEY", "WANDB_API_KEY"] or "--use-wandb" not in our_flags
    # W&B settings we add to the job env (wandb_env) are allowed extras.
    for extra in wandb_job_env(c, use_wandb="--use-wandb" in our_flags):
        ours.pop(extra, None)
    # Deliberate: the TensorBoard events folder of this launch (see the flag above).
    assert "TENSORBOARD_DIR" not in seed_job
    tb_dir = ours.pop("TENSORBOARD_DIR", None)
    assert tb_dir == (f"{c['paths']['save']}/tensorboard/{plan.submission_id}" if c["metrics"]["tensorboard"] else None)
    # Deliberate: heads clawgym starts serve the stacks of a hung job (clawgym/supervisor/stacks.py).
    assert ours.pop("RAY_DASHBOARD_ENABLE_PROFILING") == "1"
    norm_no_proxy(seed_job)
    assert ours == seed_job

    # The local head: same options, except where it listens.
    seed_head, our_head = effective_flags(seed.ray_start["argv"][1:]), effective_flags(plan.ray_start[2:])
    assert seed_head.pop("--dashboard-host") == "0.0.0.0"
    assert our_head.pop("--dashboard-host") == c["ray"]["dashboard_host"]
    # We name the GCS port (Ray's default unless ray.port is set); the seed relies on the default.
    assert our_head.pop("--port") == str(c["ray"]["port"])
    assert normalized(our_head) == normalized(seed_head)

    # No secret value anywhere in the plan or its printout.
    text = plan.to_json() + format_plan(plan)
    for secret in (WANDB_SECRET, SGLANG_SECRET):
        assert secret not in text


@pytest.fixture(scope="module")
def seed_text() -> str:
    return SEED.read_text()


# ---------------------------------------------------------------- the table itself

def test_table_covers_every_variable_the_seed_reads(seed_text):
    reads = seed_env_reads(seed_text)
    assert reads == set(ROWS), (
        f"not in the migration table: {sorted(reads - set(ROWS))}; "
        f"in the table but not read by the seed: {sorted(set(ROWS) - reads)}"
    )


# README is a front page now and links to docs/migration.md for the table.
@pytest.mark.parametrize("doc_path", [MIGRATION_DOC], ids=["docs-migration"])
def test_migration_doc_matches_table(doc_path):
    doc = doc_path.read_text()
    expected = render_table()
    assert expected in doc, f"{doc_path.name} is out of date; its migration table must read:\n\n{expected}\n"


def test_every_table_override_composes(seed_checkout):
    """Each row's overrides are real keys (composing all rows at once must validate clean)."""
    env = {row.var: row.sample.format(root=seed_checkout) for row in MIGRATION if row.sample}
    # Rows that are alternatives of one another cannot all apply at once.
    for var in ("USE_COLOCATE", "ACTOR_GPUS", "ROLLOUT_GPUS", "REF_LOAD"):
        env.pop(var)
    our_plan(seed_checkout, overrides_for(env, seed_checkout), env)


# ---------------------------------------------------------------- parity runs

def test_stand_ins_shadow_every_dangerous_tool(seed_checkout):
    """The seed's PATH reaches only stand-ins and harmless tools: no real pkill, ray or docker."""
    path = seed_path(seed_checkout)
    for tool in ("ray", "pkill", "docker", "sleep"):
        assert shutil.which(tool, path=path) == str(seed_checkout / ".standins" / tool)
    for tool in ("kill", "killall", "python", "python3", "bash"):
        assert shutil.which(tool, path=path) is None


def test_seed_defaults_parity(seed_checkout, seed_text, tmp_path):
    seed = run_seed(seed_checkout, {}, tmp_path)
    cfg, plan = our_plan(seed_checkout, [], {})
    assert_parity(seed, cfg, plan, {}, seed_exports(seed_text))
    # The stand-ins caught the seed's cleanup (which kills every python and Ray process).
    assert ["-9", "python"] in [c["argv"] for c in seed.calls_of("pkill")]
    assert ["stop", "--force"] in [c["argv"] for c in seed.calls_of("ray")]
    assert plan.entrypoint[1] == "train_async.py"
    # The seed tees its output to <save>/logs/train_<timestamp>.log; the plan's log file is there too.
    logs = Path(plan.save_dir) / "logs"
    assert list(logs.glob("train_*.log")) and Path(plan.log_file).parent == logs
    assert Path(plan.log_file).name == f"train_{TIMESTAMP}.log"


MATRIX = [row for row in MIGRATION if row.sample is not None]
_BASELINES: Dict[Tuple, SeedRun] = {}


def baseline(root: Path, with_env: Tuple[Tuple[str, str], ...], tmp_path: Path) -> SeedRun:
    """The seed run without the row's variable (cached: rows share few baselines)."""
    if (root, with_env) not in _BASELINES:
        _BASELINES[(root, with_env)] = run_seed(root, dict(with_env), tmp_path)
    return _BASELINES[(root, with_env)]


@pytest.mark.parametrize("row", MATRIX, ids=[row.var for row in MATRIX])
def test_seed_env_var_parity(row: EnvRow, seed_checkout, seed_text, tmp_path):
    env = {row.var: row.sample, **dict(row.with_env)}
    env = {k: v.format(root=seed_checkout) for k, v in env.items()}
    seed = run_seed(seed_checkout, env, tmp_path)
    cfg, plan = our_plan(seed_checkout, overrides_for(env, seed_checkout), env)
    assert_parity(seed, cfg, plan, env, seed_exports(seed_text))
    # The variable moved something (a row that changes nothing would be untested).
    base = baseline(seed_checkout, row.with_env, tmp_path)
    moved = seed.entrypoint != base.entrypoint or seed.ray_start["argv"] != base.ray_start["argv"] or \
        seed.job_env(seed_exports(seed_text)) != base.job_env(seed_exports(seed_text))
    assert moved, f"{row.var}={row.sample} changed nothing in the seed's launch"


COMBINATIONS = {
    "colocate-on-4-gpus": {"USE_COLOCATE": "1", "NUM_GPUS": "4"},
    "split-2-2-on-4-gpus": {"NUM_GPUS": "4", "ACTOR_GPUS": "2", "ROLLOUT_GPUS": "2", "SGLANG_TP": "2"},
    "wandb-project-exp-and-both-keys": {"WANDB_KEY": WANDB_SECRET, "WANDB_API_KEY": "other-" + WANDB_SECRET,
                                        "WANDB_PROJECT": "p", "EXP_NAME": "e2", "SGLANG_API_KEY": SGLANG_SECRET},
    # Switch values that mean "default" need no override.
    "switch-defaults": {"USE_WANDB": "1", "WANDB_KEY": WANDB_SECRET, "OPENCLAW_RECORD_ENABLED": "0",
                        "SKIP_INITIAL_EVAL": ""},
    # ${REASONING_PARSER:+...}: an empty parser is no parser (no flag), in both.
    "empty-reasoning-parser": {"REASONING_PARSER": ""},
    "openclaw-all": {"OPENCLAW_CONTEXT_WINDOW": "16384", "OPENCLAW_MAX_TOKENS": "2048",
                     "OPENCLAW_ROOTFS": "/srv/rootfs", "OPENCLAW_EVAL_TASKS": "/e", "OPENCLAW_TRAIN_TASKS": "/t",
                     "OPENCLAW_RECORD_ENABLED": "1", "MASTER_ADDR": "10.1.2.3", "REF_LOAD": "{root}/r"},
}


@pytest.mark.parametrize("name", list(COMBINATIONS))
def test_seed_env_combination_parity(name, seed_checkout, seed_text, tmp_path):
    env = {k: v.format(root=seed_checkout) for k, v in COMBINATIONS[name].items()}
    seed = run_seed(seed_checkout, env, tmp_path)
    cfg, plan = our_plan(seed_checkout, overrides_for(env, seed_checkout), env)
    assert_parity(seed, cfg, plan, env, seed_exports(seed_text))


# ---------------------------------------------------------------- deliberate differences

def test_use_colocate_0_turns_colocation_on_in_seed_but_not_here(seed_checkout, tmp_path):
    seed = run_seed(seed_checkout, {"USE_COLOCATE": "0"}, tmp_path)
    assert seed.returncode == 0
    # The seed: --colocate with the async trainer (which asserts it is not colocated).
    assert "--colocate" in seed.entrypoint and seed.entrypoint[1] == "train_async.py"
    _, plan = our_plan(seed_checkout, [], {})
    assert "--colocate" not in plan.entrypoint and plan.entrypoint[1] == "train_async.py"


def test_skip_initial_eval_0_skips_in_seed_but_not_here(seed_checkout, tmp_path):
    seed = run_seed(seed_checkout, {"SKIP_INITIAL_EVAL": "0"}, tmp_path)
    assert "--skip-eval-before-train" in seed.entrypoint
    _, plan = our_plan(seed_checkout, [], {})
    assert "--skip-eval-before-train" not in plan.entrypoint
    _, plan = our_plan(seed_checkout, ["eval.skip_before_train=false"], {})
    assert "--skip-eval-before-train" not in plan.entrypoint


def test_wandb_key_in_environment_only(seed_checkout, tmp_path):
    env = {"WANDB_KEY": WANDB_SECRET}
    seed = run_seed(seed_checkout, env, tmp_path)
    assert effective_flags(seed.entrypoint[2:])["--wandb-key"] == WANDB_SECRET
    _, plan = our_plan(seed_checkout, [], env)
    assert "--use-wandb" in plan.entrypoint and "--wandb-key" not in plan.entrypoint
    assert WANDB_SECRET not in plan.to_json()
    assert plan.secret_env["WANDB_API_KEY"] == ["WANDB_KEY", "WANDB_API_KEY"]


def test_loopback_binds_unless_asked(seed_checkout, seed_text, tmp_path):
    """The seed binds the API server and the dashboard to 0.0.0.0; we do when asked, and then match."""
    seed = run_seed(seed_checkout, {}, tmp_path)
    cfg, plan = our_plan(seed_checkout, [], {})
    assert plan.runtime_env["env_vars"]["HOST"] == "127.0.0.1"
    assert "127.0.0.1" == plan.ray_start[plan.ray_start.index("--dashboard-host") + 1]
    cfg, plan = our_plan(seed_checkout, ["sglang.api_host=0.0.0.0", "ray.dashboard_host=0.0.0.0"], {})
    assert plan.runtime_env["env_vars"]["HOST"] == "0.0.0.0"
    assert plan.ray_start[plan.ray_start.index("--dashboard-host") + 1] == "0.0.0.0"
    # Listening on all interfaces is still reached through loopback.
    assert plan.address == "http://127.0.0.1:8265"
    assert_parity(seed, cfg, plan, {}, seed_exports(seed_text))


def test_existing_cluster_gets_the_complete_job_env(seed_checkout, seed_text, tmp_path):
    """With ray.address the runtime env alone carries what the seed's job sees (except the
    head's own RAY_* tuning, which belongs to whoever started that cluster)."""
    seed = run_seed(seed_checkout, {}, tmp_path)
    _, plan = our_plan(seed_checkout, ["ray.address=http://head:8265"], {})
    assert plan.ray_start is None and plan.address == "http://head:8265"
    seed_job = {k: v for k, v in seed.job_env(seed_exports(seed_text)).items() if not k.startswith("RAY_")}
    ours = dict(plan.runtime_env["env_vars"])
    for k in ("HOST", "SGLANG_API_KEY"):  # deliberate, see assert_parity
        seed_job.pop(k)
        ours.pop(k, None)
    assert norm_pythonpath(ours.pop("PYTHONPATH")) == norm_pythonpath(seed_job.pop("PYTHONPATH"))
    # Deliberate (see assert_parity): the TensorBoard events folder; the seed keeps no events.
    assert ours.pop("TENSORBOARD_DIR").endswith(f"/tensorboard/{plan.submission_id}")
    # PYTHONUNBUFFERED, MASTER_ADDR, no_proxy... reach the job through the runtime env.
    norm_no_proxy(seed_job)
    assert ours == seed_job


@pytest.mark.parametrize("env, code", [
    ({"ACTOR_GPUS": "6"}, "local-head-gpus-fit"),
    ({"NUM_GPUS": "4"}, "local-head-gpus-fit"),
])
def test_layouts_the_seed_refuses_are_reported(env, code, seed_checkout, tmp_path):
    """The seed refuses a layout over one node's GPUs, and so does clawgym on the one node of a
    head it starts (cluster=local); on a cluster of several nodes slime starts it (Ray places it
    over them), so there clawgym only warns and leaves the GPU count to the capacity check."""
    from clawgym.config.compose import compose
    from clawgym.validate import check

    seed = run_seed(seed_checkout, env, tmp_path)
    assert seed.returncode == 1 and "must be <= NUM_GPUS" in seed.output
    assert not seed.calls_of("ray") or all(c["argv"][:1] == ["stop"] for c in seed.calls_of("ray"))
    overrides = [f"paths.root={seed_checkout}", *overrides_for(env, seed_checkout)]
    errors, _ = check(compose(overrides))
    assert code in [v.code for v in errors]
    _, warned = check(compose([*overrides, "ray.address=http://10.0.0.1:8265"]))
    assert "split-gpus-fit" in [v.code for v in warned]
