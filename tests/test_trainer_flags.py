"""Trainer flavours, the flag registries, the owner table, ``args.<dest>``, checked
``extra_args`` and ``clawgym flags``.

The per-rule validation cases (one per code) are in tests/test_validation.py; here: the
registry data holds together, the owner table agrees with it, what the plan emits parses
with a parser rebuilt from the registry (argparse semantics) to the values configured,
and a typo is refused before anything starts.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
from typing import Any, Dict, List, Tuple

import pytest

from clawgym.config.compose import compose, to_plain
from clawgym.trainer.flagmap import KINDS, ROWS, Owner, fork_only_rows, owned_dests, owners
from clawgym.plan.build import build_plan
from clawgym.registry import FLAVOURS, Flag, load_registry
from clawgym.trainer.args import check_arg, choice_texts, lookup, render_arg
from clawgym.validate import violations
from tests.conftest import ROOT

TS = "20260101_000000"
CK = "/ckpt/ClawGym-RL"

#: The issue's example: four flags of three parts (Megatron, SGLang, slime) and three actions.
ISSUE_ARGS = ["args.lr_warmup_iters=10", "args.sglang_ep_size=8", "args.moe_enable_deepep=true",
              "args.eval_prompt_data=[aime,/data/aime.jsonl]"]


@functools.lru_cache(maxsize=None)
def plain_and_plan(overrides: Tuple[str, ...]) -> Tuple[dict, Any]:
    cfg = compose([f"paths.root={CK}", *overrides])
    found = violations(cfg)
    assert found == [], [v.format() for v in found]
    return to_plain(cfg), build_plan(cfg, environ={}, timestamp=TS)


# ---------------------------------------------------------------- registry data

@pytest.mark.parametrize("flavour", FLAVOURS)
def test_registry_loads_and_its_recorded_option_count_matches(flavour: str):
    reg = load_registry(flavour)
    assert reg.meta["flavour"] == flavour
    options = [o for a in reg.actions for o in a.option_strings]
    assert reg.meta["option_string_count"] == len(options)
    # Every option string belongs to exactly one action.
    assert len(options) == len(set(options))
    # The whole trainer: Megatron, slime and SGLang parts, over a thousand option strings.
    assert {a.source for a in reg.actions} >= {"megatron", "slime", "sglang"}
    assert len(options) > 1000


def test_registries_record_whether_the_trainer_itself_is_strict():
    # The fork exits on an unknown flag; upstream ignores it (clawgym refuses it under both).
    assert load_registry("clawgym").meta["strict"] is True
    assert load_registry("slime").meta["strict"] is False


def test_fork_only_flags_are_in_the_fork_registry_only():
    fork, upstream = load_registry("clawgym"), load_registry("slime")
    for flag in ("--dynamic-history", "--use-dynamic-global-batch-size", "--megatron-to-hf-mode"):
        assert fork.by_option(flag) is not None, flag
        assert upstream.by_option(flag) is None, flag


def test_closest_names_a_real_flag_for_a_typo():
    reg = load_registry("clawgym")
    assert reg.closest("lr_warmup_iter")[0] == "lr_warmup_iters"
    assert reg.closest("--rollout-batch-sise")[0] == "--rollout-batch-size"
    assert reg.by_dest("lr_warmup_iters").flag == "--lr-warmup-iters"


def test_loading_the_registry_is_lazy_and_imports_no_trainer():
    code = (
        "import sys, json; import clawgym.config.compose, clawgym.plan.build, clawgym.validate, clawgym.app, clawgym.registry as r;"
        "lazy = r.load_registry.cache_info().currsize == 0;"
        "[r.load_registry(f) for f in r.FLAVOURS];"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'slime', 'megatron', 'sglang', 'ray'));"
        "print(json.dumps([lazy, heavy]))"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [True, []]


# ---------------------------------------------------------------- the owner table

@pytest.mark.parametrize("flavour", FLAVOURS)
def test_owner_table_agrees_with_the_registry(flavour: str):
    reg = load_registry(flavour)
    for row in ROWS:
        action = reg.by_option(row.flag)
        if row.fork_only and flavour != "clawgym":
            assert action is None, f"{row.flag} is marked fork-only but trainer={flavour} has it"
            continue
        if row.upstream_only and flavour == "clawgym":
            assert action is None, f"{row.flag} is marked upstream-only but trainer={flavour} has it"
            continue
        assert action is not None, f"{row.flag} ({row.key}) is not a flag of trainer={flavour}"
        # The kind says how to invert the flag: switches are flags without a value, values take one.
        bare = action.action in ("store_true", "store_false", "store_const") or action.nargs == 0
        if row.kind in ("switch", "inverse_switch"):
            assert bare, (row.flag, action.action)
        elif row.kind == "value":
            assert not bare, (row.flag, action.action)


def test_owners_api_is_keyed_by_option_string():
    own = owners("clawgym")
    assert own["--lr"] == Owner("optimizer.lr", "value")
    assert own["--colocate"] == Owner("gpu_layout.colocate", "switch")
    assert own["--disable-rollout-global-dataset"] == Owner("rollout.global_dataset", "inverse_switch")
    assert own["--group-query-attention"].kind == "derived"
    assert all(o.kind in KINDS for o in own.values())
    # Fork-only flags have no owner upstream (an imported upstream script cannot carry them).
    assert "--dynamic-history" in own and "--dynamic-history" not in owners("slime")
    assert owned_dests("clawgym")["rollout_batch_size"].key == "rollout.batch_size"


def test_every_owner_key_exists_in_the_config():
    c = to_plain(compose([]))
    for row in ROWS:
        node: Any = c
        for part in row.key.split("."):
            assert part in node, row.key
            node = node[part]


# ---------------------------------------------------------------- args.<dest>: values and argv

def registry_parser(flavour: str) -> argparse.ArgumentParser:
    """An argparse parser rebuilt from the registry: the trainer's option strings, actions, nargs,
    types, choices, consts and required flags, with exact names only (no abbreviations)."""
    types = {"int": int, "float": float}
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    for a in load_registry(flavour).actions:
        if a.action in ("help", "version"):
            continue
        kw: Dict[str, Any] = {"dest": a.dest, "required": a.required, "default": None}
        if a.action in ("store_true", "store_false", "count"):
            kw["action"] = a.action
        elif a.action in ("store_const", "append_const"):
            kw.update(action=a.action, const=a.const)
        elif a.action == "BooleanOptionalAction":
            kw["action"] = argparse.BooleanOptionalAction
            parser.add_argument(*[o for o in a.option_strings if not o.startswith("--no-")], **kw)
            continue
        else:
            kw["action"] = a.action if a.action in ("append", "extend") else "store"
            if a.nargs is not None:
                kw["nargs"] = a.nargs
            kw["type"] = types.get(a.type or "", str)
            if a.choices is not None:
                # Enum choices (stored as reprs) are checked by the trainer's own type; keep the names.
                kw["choices"] = choice_texts(a) if a.cli_choices is not None else list(a.choices)
            if kw["nargs"] == 0 if "nargs" in kw else False:
                kw = {"dest": a.dest, "action": "store_true"}
        parser.add_argument(*a.option_strings, **kw)
    return parser


def parse_plan_argv(flavour: str, argv: List[str]) -> argparse.Namespace:
    ns, unknown = registry_parser(flavour).parse_known_args(argv)
    assert unknown == [], f"trainer={flavour} would not know {unknown}"
    return ns


# qwen3_30b_a3b colocated at TP 4 (as slime's scripts run it): its 4 query groups do not split over TP 8.
@pytest.mark.parametrize("overrides", [(), ("trainer=slime",),
                                       ("gpu_layout=colocate_8", "model=qwen3_30b_a3b", "perf.tensor_parallel=4"),
                                       ("trainer=slime", "gpu_layout=colocate_8"), tuple(ISSUE_ARGS),
                                       ("trainer=slime", *ISSUE_ARGS)])
def test_plan_argv_parses_with_the_flavours_parser(overrides):
    c, plan = plain_and_plan(tuple(overrides))
    flavour = c["trainer"]["flavour"]
    ns = parse_plan_argv(flavour, plan.entrypoint[2:])
    # Curated keys land where the owner table says.
    assert ns.lr == c["optimizer"]["lr"] and ns.rollout_batch_size == c["rollout"]["batch_size"]
    assert ns.rollout_global_dataset is (False if c["rollout"]["global_dataset"] is False else None)
    for item in overrides:
        if item.startswith("args."):
            name = item.split("=", 1)[0][5:]
            dest = lookup(load_registry(flavour), name).dest
            assert getattr(ns, dest) == c["args"][name], name


def test_issue_example_args_are_emitted_once_after_the_curated_flags():
    _, base = plain_and_plan(())
    _, plan = plain_and_plan(tuple(ISSUE_ARGS))
    n = len(base.entrypoint)
    assert plan.entrypoint[:n] == base.entrypoint
    # By dest, sorted; each with the syntax of its action.
    assert plan.entrypoint[n:] == ["--eval-prompt-data", "aime", "/data/aime.jsonl", "--lr-warmup-iters", "10",
                                   "--moe-enable-deepep", "--sglang-ep-size", "8"]


def _first(reg, pred) -> Flag:
    found = [a for a in reg.actions if pred(a) and a.dest not in owned_dests(reg.flavour)]
    assert found, "the registry has no such flag"
    return found[0]


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_args_render_each_action_as_argparse_reads_it(flavour: str):
    reg = load_registry(flavour)
    parser = registry_parser(flavour)
    cases = [
        (_first(reg, lambda a: a.action == "store" and a.type == "int" and a.nargs is None and not a.choices), 7),
        (_first(reg, lambda a: a.action == "store" and a.type == "float" and a.nargs is None and not a.choices), 0.25),
        (_first(reg, lambda a: a.action == "store_true" and len(reg.all_by_dest(a.dest)) == 1), True),
        (_first(reg, lambda a: a.action == "store_false" and len(reg.all_by_dest(a.dest)) == 1), False),
        (_first(reg, lambda a: a.action == "store" and a.nargs == "+" and a.type in (None, "str")
                and not a.choices), ["a", "b"]),
        (_first(reg, lambda a: a.action == "store" and a.choices and a.nargs is None and a.type in (None, "str")),
         None),
    ]
    for flag, value in cases:
        if value is None:
            value = flag.choices[-1]
        assert check_arg(reg, flag.dest, value) is None, (flag, value)
        tokens = render_arg(reg, flag.dest, value)
        # --rollout-batch-size is required by the trainer's parser.
        ns, unknown = parser.parse_known_args([*tokens, "--rollout-batch-size", "8"])
        assert unknown == [] and getattr(ns, flag.dest) == value, (flag.flag, tokens, getattr(ns, flag.dest))
    # A switch left at its default emits nothing.
    switch = cases[2][0]
    assert render_arg(reg, switch.dest, False) == [] and render_arg(reg, switch.dest, None) == []


def test_store_false_dest_takes_the_value_it_sets():
    reg = load_registry("clawgym")
    flag = reg.by_option("--no-gradient-accumulation-fusion")
    assert flag.action == "store_false" and flag.dest == "gradient_accumulation_fusion"
    assert render_arg(reg, flag.dest, False) == ["--no-gradient-accumulation-fusion"]
    assert render_arg(reg, flag.dest, True) == []


def test_args_key_may_name_a_flag_by_an_alias_option_string():
    # SGLang's --sglang-ep-size is an alias of --sglang-expert-parallel-size (dest sglang_expert_parallel_size).
    reg = load_registry("clawgym")
    assert lookup(reg, "sglang_ep_size").dest == "sglang_expert_parallel_size"
    assert render_arg(reg, "sglang_ep_size", 8) == ["--sglang-ep-size", "8"]
    assert render_arg(reg, "sglang_expert_parallel_size", 8) == ["--sglang-expert-parallel-size", "8"]


# ---------------------------------------------------------------- flavours

def test_slime_flavour_has_no_fork_flags_and_no_agent_env():
    c, plan = plain_and_plan(("trainer=slime",))
    argv = plan.entrypoint
    for row in fork_only_rows():
        assert row.flag not in argv
    for hook in ("--custom-generate-function-path", "--custom-rm-path", "--disable-rollout-global-dataset"):
        assert hook not in argv
    env = plan.runtime_env["env_vars"]
    assert not [k for k in env if k.startswith("OPENCLAW_")] and "SERVED_MODEL_NAME" not in env
    assert env["PYTHONPATH"] and env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    assert argv[argv.index("--rollout-function-path") + 1] == "slime.rollout.sglang_rollout.generate_rollout"


def test_clawgym_flavour_is_the_default_and_keeps_the_fork_defaults():
    c, plan = plain_and_plan(())
    assert c["trainer"] == {"flavour": "clawgym", "agent_env": True}
    assert c["args"] == {}
    for flag in ("--dynamic-history", "--use-dynamic-global-batch-size", "--megatron-to-hf-mode",
                 "--custom-rm-path", "--custom-generate-function-path"):
        assert flag in plan.entrypoint
    assert "OPENCLAW_TRAIN_TASKS" in plan.runtime_env["env_vars"]
    assert plain_and_plan(("trainer=clawgym",))[1] == plan


@pytest.mark.parametrize("via", [["args.dynamic_history=true"], ["extra_args=[--dynamic-history]"],
                                 ["grpo.dynamic_history=true"], ["checkpoint.megatron_to_hf_mode=bridge"]])
def test_fork_only_flag_under_upstream_is_refused_saying_so(via):
    found = violations(compose(["trainer=slime", *via]))
    assert [v.code for v in found] == ["trainer-flag-fork-only"], [v.format() for v in found]
    assert "only in the ClawGym fork" in found[0].rule and "trainer=clawgym" in found[0].fix


def test_args_need_no_plus_and_show_in_the_composed_config():
    c = to_plain(compose(["args.lr_warmup_iters=10"]))
    assert c["args"] == {"lr_warmup_iters": 10}


# ---------------------------------------------------------------- typos refused before anything starts

@pytest.mark.parametrize("flavour, typo, closest", [
    ("clawgym", "args.lr_warmup_iter=10", "args.lr_warmup_iters"),
    ("slime", "args.sglang_ep_sise=8", "args.sglang_ep_size"),
    ("clawgym", "extra_args=[--rollout-batch-sise,8]", "--rollout-batch-size"),
    ("slime", "extra_args=[--sglang-bogus-flag,1]", "--sglang-"),
])
def test_typo_in_a_trainer_flag_is_refused_with_nothing_started(flavour, typo, closest, tmp_path):
    run_dir = tmp_path / "run"
    # Not a dry run: only validation stands between the typo and a launch. An unreachable
    # existing cluster makes sure no local head could be started even if it did not.
    proc = subprocess.run(
        [sys.executable, "train.py", f"trainer={flavour}", typo, "ray.address=http://127.0.0.1:9",
         f"paths.root={tmp_path}", f"hydra.run.dir={run_dir}"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, "HYDRA_FULL_ERROR": "0"})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("clawgym: invalid configuration"), proc.stderr
    assert closest in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "exp").exists()
    assert not list(run_dir.rglob("launch_plan.json")) if run_dir.exists() else True


# ---------------------------------------------------------------- clawgym flags

def test_clawgym_flags_json_lists_every_flag_with_its_owner(capsys):
    from clawgym.cli import main as cli

    assert cli(["flags", "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    reg = load_registry("clawgym")
    assert len(records) == len(reg.actions)
    for field in ("option_strings", "dest", "type", "nargs", "choices", "default", "required", "action", "source",
                  "owner"):
        assert all(field in r for r in records), field
    by_flag = {r["flag"]: r for r in records}
    assert by_flag["--lr"]["owner"] == "optimizer.lr"
    assert by_flag["--lr-warmup-iters"]["owner"] is None and by_flag["--lr-warmup-iters"]["type"] == "int"
    assert by_flag["--dynamic-history"]["owner"] == "grpo.dynamic_history"


def test_clawgym_flags_filters_by_pattern_and_flavour(capsys):
    from clawgym.cli import main as cli

    assert cli(["flags", "--trainer", "slime", "sglang-ep", "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert records and all("sglang-ep" in " ".join(r["option_strings"]) or "sglang_ep" in r["dest"] for r in records)
    assert cli(["flags", "--trainer", "slime", "dynamic-history", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert cli(["flags", "--trainer", "clawgym", "*-history"]) == 0
    out = capsys.readouterr().out
    assert "--dynamic-history" in out


def test_clawgym_flags_text_table_has_the_columns(capsys):
    from clawgym.cli import main as cli

    assert cli(["flags", "warmup-iters"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("trainer=clawgym: ")
    header = [c.strip() for c in lines[1].split("│")]
    assert header == ["flag", "dest", "type", "default", "choices", "help", "set with"]
    row = next(line for line in lines if line.strip().startswith("--lr-warmup-iters "))
    cells = [c.strip() for c in row.split("│")]
    assert cells[1] == "lr_warmup_iters" and cells[2] == "int" and cells[-1] == "args.lr_warmup_iters"
    # No match: says so, exits 1 like grep.
    assert cli(["flags", "no-such-flag-anywhere"]) == 1
    assert "no flag matches" in capsys.readouterr().out


# ---------------------------------------------------------------- args is a group like any other

def test_args_reach_cfg_job_snapshot_diff_and_wandb_config(tmp_path):
    from clawgym.commands.diff import config_changes, flag_changes, resolve_side
    from clawgym.snapshot.layout import RESOLVED_FILE
    from clawgym.snapshot.records import LaunchRecord
    from clawgym.snapshot.write import snapshot_files
    from clawgym.trainer.wandb_env import wandb_config_document

    proc = subprocess.run([sys.executable, "train.py", "--cfg", "job", "args.lr_warmup_iters=10"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "args:\n  lr_warmup_iters: 10\n" in proc.stdout
    cfg = compose([f"paths.root={tmp_path}", "args.lr_warmup_iters=10"])
    plan = build_plan(cfg, environ={}, timestamp=TS)
    files = snapshot_files(cfg, plan, LaunchRecord(overrides=["args.lr_warmup_iters=10"]), snapshot_id="x", now=0)
    assert "args:\n  lr_warmup_iters: 10\n" in files[RESOLVED_FILE]
    doc = wandb_config_document(to_plain(cfg), {})
    assert doc["clawgym"]["value"]["args"] == {"lr_warmup_iters": 10}
    a, b = resolve_side(""), resolve_side("args.lr_warmup_iters=10")
    assert ("args.lr_warmup_iters", "(absent)", 10) in config_changes(a.config, b.config)
    assert ("--lr-warmup-iters", "(absent)", "10") in flag_changes(a.entrypoint, b.entrypoint)


def test_resume_refuses_to_switch_the_trainer_flavour():
    from clawgym.commands.resume import ResumeError, apply_overrides

    cfg = compose([])
    with pytest.raises(ResumeError, match="trainer"):
        apply_overrides(cfg, ["trainer=slime"])


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_abbreviated_flag_is_refused_naming_the_whole_flag(flavour: str):
    # Upstream's SGLang parser (allow_abbrev=True) would take this as --sglang-mem-fraction-static.
    found = violations(compose([f"trainer={flavour}", "extra_args=[--sglang-mem-fraction,0.5]"]))
    assert [v.code for v in found] == ["extra-args-unknown-flag"]
    assert "abbreviation" in found[0].rule
    # The whole flag is owned by a group key: the fix names that key.
    assert "sglang.mem_fraction_static (--sglang-mem-fraction-static)" in found[0].fix


def test_secret_index_matches_the_registries():
    """clawgym/registry/data/secret_options.json is derived from the registries (tools/gen_flag_registry.py
    rewrites it; so does clawgym.common.secrets.write_secret_index()): every entry matches its file."""
    from clawgym.common.secrets import _indexed_secret_options, _scan_secret_options

    for flavour in FLAVOURS:
        indexed = _indexed_secret_options(flavour)
        assert indexed is not None, f"stale secret index for {flavour}: run clawgym.common.secrets.write_secret_index()"
        assert set(indexed) == _scan_secret_options(load_registry(flavour))


def test_a_secret_index_of_another_registry_file_is_not_used(tmp_path, monkeypatch):
    """A registry changed after the index was written is scanned, not read from the index."""
    import shutil

    import clawgym.registry as registry
    import clawgym.common.secrets as secrets

    data = tmp_path / "data"
    shutil.copytree(registry.DATA_DIR, data)
    path = data / "slime.json"
    text = path.read_text()
    extra = '{"option_strings":["--judge-api-key"],"dest":"judge_api_key","type":"str","nargs":null,' \
            '"choices":null,"default":null,"required":false,"action":"store","const":null,"source":"slime",' \
            '"parser":"slime","help":null},\n'
    path.write_text(text.replace('"actions": [\n', '"actions": [\n' + extra, 1))
    monkeypatch.setattr(registry, "DATA_DIR", data)
    monkeypatch.setattr(secrets, "_SECRET_OPTIONS", {})
    load_registry.cache_clear()
    try:
        assert secrets._indexed_secret_options("slime") is None
        assert secrets._indexed_secret_options("clawgym") is not None
        assert "--judge-api-key" in secrets.secret_options()
    finally:
        load_registry.cache_clear()
