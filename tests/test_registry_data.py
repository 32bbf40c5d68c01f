"""The committed flag registries keep the contract of REGISTRY_SPEC (tools/README.md).

These read the JSON with the standard library only: they check the data that
tools/gen_flag_registry.py produced from the trainers' own parsers, not the loader.
"""

import json
from pathlib import Path

import pytest

import clawgym

DATA = Path(clawgym.__file__).resolve().parent / "registry" / "data"
FLAVOURS = ("clawgym", "slime")
SOURCES = {"megatron", "slime", "sglang", "router"}
ACTION_KINDS = {
    "store", "store_true", "store_false", "store_const", "append", "append_const",
    "count", "extend", "BooleanOptionalAction",
}
REQUIRED_FIELDS = (
    "option_strings", "dest", "type", "nargs", "choices", "default", "required",
    "action", "const", "source", "parser", "help",
)
# Flags only the ClawGym fork (or the v0.2.4 SGLang patch it runs with) defines.
FORK_ONLY = ("--dynamic-history", "--megatron-to-hf-mode", "--use-dynamic-global-batch-size",
             "--sglang-disable-draft-cuda-graph")
# Flags that exist upstream only because v0.3.1's image patches add them (Megatron 1dcf0daf
# and SGLang 0.5.15.post1 as released lack them): proof the patches were applied.
UPSTREAM_PATCH_FLAGS = ("--use-gated-attention", "--sglang-release-hicache",
                        "--sglang-custom-pull-weights-pre-read-hook")


def _load(flavour):
    with open(DATA / f"{flavour}.json", encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module", params=FLAVOURS)
def registry(request):
    return _load(request.param)


def _by_option(reg):
    return {o: a for a in reg["actions"] for o in a["option_strings"]}


def test_recorded_option_string_count_equals_option_strings_in_actions(registry):
    total = sum(len(a["option_strings"]) for a in registry["actions"])
    assert registry["meta"]["option_string_count"] == total
    assert registry["meta"]["action_count"] == len(registry["actions"])


def test_each_option_string_appears_in_exactly_one_action(registry):
    seen = {}
    for action in registry["actions"]:
        assert action["option_strings"], f"action {action['dest']} has no option string"
        for option in action["option_strings"]:
            assert option.startswith("-"), option
            assert option not in seen, f"{option} in {seen.get(option)} and {action['dest']}"
            seen[option] = action["dest"]


def test_every_action_has_the_contract_fields_with_valid_values(registry):
    parser_names = {p["name"] for p in registry["meta"]["parsers"]}
    for a in registry["actions"]:
        missing = [k for k in REQUIRED_FIELDS if k not in a]
        assert not missing, f"{a.get('option_strings')} lacks {missing}"
        where = a["option_strings"][0]
        assert isinstance(a["dest"], str) and a["dest"], where
        assert a["type"] is None or isinstance(a["type"], str), where
        assert a["nargs"] is None or isinstance(a["nargs"], (int, str)), where
        assert isinstance(a["nargs"], int) or a["nargs"] in (None, "?", "*", "+", "...", "A..."), where
        assert a["choices"] is None or isinstance(a["choices"], list), where
        assert isinstance(a["required"], bool), where
        assert a["action"] in ACTION_KINDS or a["action"][:1].isupper(), (where, a["action"])
        assert a["source"] in SOURCES, (where, a["source"])
        assert a["parser"] in parser_names, (where, a["parser"])
        assert a["help"] is None or (isinstance(a["help"], str) and "\n" not in a["help"]), where


def test_meta_names_the_sources_parsers_and_strictness(registry):
    meta = registry["meta"]
    assert meta["flavour"] in FLAVOURS
    assert meta["generator"] == "tools/gen_flag_registry.py"
    assert set(meta["sources"]) == SOURCES
    for key in ("slime", "megatron"):
        assert meta["sources"][key]["repo"] and meta["sources"][key]["ref"], key
    for key in ("sglang", "router"):
        assert meta["sources"][key]["version"], key
    for parser in meta["parsers"]:
        assert isinstance(parser["allow_abbrev"], bool), parser["name"]
        assert parser["unknown_args"] in ("error", "ignored"), parser["name"]
    assert meta["strict"] == any(p["unknown_args"] == "error" for p in meta["parsers"])
    # Every part of the trainer contributed flags.
    assert {a["source"] for a in registry["actions"]} == SOURCES


def test_help_actions_are_left_out_and_recorded_as_excluded(registry):
    assert not any(a["action"] in ("help", "version") for a in registry["actions"])
    assert "--help" in registry["meta"]["excluded_option_strings"]
    assert "--help" not in _by_option(registry)


def test_fork_is_one_strict_parser_and_upstream_is_lenient_with_abbreviating_sglang_parser():
    fork, upstream = _load("clawgym")["meta"], _load("slime")["meta"]
    assert fork["strict"] is True
    main = [p for p in fork["parsers"] if p["unknown_args"] == "error"]
    assert [p["name"] for p in main] == ["megatron+slime"]
    assert main[0]["allow_abbrev"] is False
    assert main[0]["option_string_count"] == fork["option_string_count"]
    assert upstream["strict"] is False
    parsers = {p["name"]: p for p in upstream["parsers"]}
    assert parsers["sglang+router"]["allow_abbrev"] is True
    assert parsers["megatron+slime"]["allow_abbrev"] is False


def test_flavours_record_the_versions_their_images_pin():
    fork, upstream = _load("clawgym")["meta"]["sources"], _load("slime")["meta"]["sources"]
    assert fork["sglang"]["version"] == "0.5.9"
    assert [p["ref"] for p in fork["sglang"]["patches"]] == ["v0.2.4"]
    assert fork["slime"]["ref"].startswith("0e8526d8")
    assert upstream["sglang"]["version"] == "0.5.15.post1"
    assert upstream["slime"]["ref"] == "v0.3.1"
    assert upstream["megatron"]["ref"].startswith("1dcf0daf")
    assert upstream["megatron"]["patches"] and len(upstream["sglang"]["patches"]) == 4


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_known_flags_have_the_shape_of_the_trainer_parser(flavour):
    flags = _by_option(_load(flavour))
    warmup = flags["--lr-warmup-iters"]
    assert (warmup["type"], warmup["action"], warmup["nargs"], warmup["source"]) == ("int", "store", None, "megatron")
    assert warmup["default"] == 0

    # One action, three spellings; SGLang 0.5.15 made --ep-size the primary (dest sglang_ep_size).
    ep = flags["--sglang-ep-size"]
    assert ep["dest"] in ("sglang_expert_parallel_size", "sglang_ep_size")
    assert (ep["type"], ep["source"], ep["default"]) == ("int", "sglang", 1)
    assert flags["--sglang-expert-parallel-size"] is ep

    deepep = flags["--moe-enable-deepep"]
    assert (deepep["action"], deepep["default"], deepep["type"]) == ("store_true", False, None)

    eval_data = flags["--eval-prompt-data"]
    assert eval_data["nargs"] == "+" and eval_data["source"] == "slime"

    batch = flags["--rollout-batch-size"]
    assert batch["required"] is True and batch["type"] == "int"

    assert flags["--global-batch-size"]["type"] == "int"
    assert flags["--router-policy"]["source"] == "router" and "cache_aware" in flags["--router-policy"]["choices"]
    assert flags["--sglang-mem-fraction-static"]["type"] == "float"


@pytest.mark.parametrize("flag", FORK_ONLY)
def test_fork_only_flags_are_in_clawgym_and_not_in_upstream_slime(flag):
    assert flag in _by_option(_load("clawgym"))
    assert flag not in _by_option(_load("slime"))


@pytest.mark.parametrize("flag", UPSTREAM_PATCH_FLAGS)
def test_upstream_image_patches_were_applied_to_the_parsers(flag):
    assert flag in _by_option(_load("slime"))


def test_upstream_skips_sglang_tp_size_which_slime_sets_itself():
    assert "--sglang-tp-size" not in _by_option(_load("slime"))
    assert "--sglang-tp-size" in _by_option(_load("clawgym"))


def test_custom_actions_name_the_argparse_action_that_decides_their_syntax(registry):
    custom = [a for a in registry["actions"] if a["action"] not in ACTION_KINDS]
    assert custom, "both trainers define custom Action classes"
    for a in custom:
        assert "action_base" in a, a["option_strings"]
        assert a["action_base"] is None or a["action_base"] in ACTION_KINDS, a["option_strings"]


def test_string_choices_are_recorded_sorted_so_regeneration_is_stable(registry):
    for a in registry["actions"]:
        choices = a["choices"]
        if choices and all(isinstance(c, str) and not c.startswith("<non-json: ") for c in choices):
            assert choices == sorted(choices), a["option_strings"]

