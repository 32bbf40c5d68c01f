"""Prompt-data check, and reading flags back from the plan's trainer argv.

The checks read the *plan's* argv rather than config keys, so a flag counts however it was
set (a curated key, ``args.*`` or ``extra_args``), with argparse's semantics: the last
occurrence wins, ``--flag=value`` equals ``--flag value``, and a flag with ``nargs='+'``
(``--eval-prompt-data name path ...``) takes every value up to the next flag.

Only the first lines of each JSONL file are read, so a check of a large dataset is instant.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

from clawgym.preflight.core import CheckFailed, Context, NotApplicable

#: Non-empty lines of each JSONL file the check reads.
FIRST_LINES = 3

#: Longest line read (a prompt line past this is still read up to here and reported, not loaded whole).
MAX_LINE_BYTES = 8 * 1024 * 1024

#: slime's defaults for the dataset keys (slime/utils/arguments.py, v0.2.x and v0.3.x alike).
DEFAULT_INPUT_KEY = "input"


def trainer_flags(argv: List[str]) -> Dict[str, List[str]]:
    """Flag -> its values, as argparse would end up with them (the last occurrence wins).

    ``argv`` is the trainer's arguments (after interpreter and script). A switch maps to [].
    """
    flags: Dict[str, List[str]] = {}
    i = 0
    while i < len(argv):
        token = str(argv[i])
        if not token.startswith("--"):
            i += 1
            continue
        if "=" in token:
            name, value = token.split("=", 1)
            flags[name] = [value]
            i += 1
            continue
        values: List[str] = []
        i += 1
        while i < len(argv) and not str(argv[i]).startswith("--"):
            values.append(str(argv[i]))
            i += 1
        flags[token] = values
    return flags


def plan_flags(plan: Any) -> Dict[str, List[str]]:
    return trainer_flags(list(plan.entrypoint[2:]))


def _one(flags: Mapping[str, List[str]], flag: str) -> Optional[str]:
    values = flags.get(flag)
    return values[-1] if values else None


def _real_path(spec: str) -> str:
    """slime's generalized path ``file@[start:end]`` -> file."""
    m = re.match(r"^(?P<path>.*)@\[-?\d*:-?\d*\]$", spec)
    return m.group("path") if m else spec


def _first_lines(path: Path, n: int) -> List[Tuple[int, str]]:
    """(line number, text) of the first n non-empty lines, each read to at most MAX_LINE_BYTES."""
    out: List[Tuple[int, str]] = []
    with path.open("rb") as fh:
        number = 0
        while len(out) < n:
            raw = fh.readline(MAX_LINE_BYTES)
            if not raw:
                break
            number += 1
            text = raw.decode("utf-8", errors="replace").strip()
            if text:
                out.append((number, text))
            if not raw.endswith(b"\n") and len(raw) >= MAX_LINE_BYTES:
                # An over-long line: what was read is reported as is (JSON will not parse).
                break
    return out


def check_jsonl(where: str, spec: str, keys: List[Tuple[str, str]]) -> str:
    """One dataset: exists, is .jsonl (or .parquet) and its first lines carry ``keys``.

    ``where`` names the flag (for messages); ``keys`` are (flag naming the key, key).
    """
    path = Path(_real_path(spec))
    if not path.is_file():
        raise CheckFailed(f"{where}={spec}: {path} does not exist or is not a file",
                          f"point {where} at a JSONL file (one JSON object per line)")
    if path.suffix == ".parquet":
        return f"{path} (parquet: columns not read)"
    if path.suffix != ".jsonl":
        raise CheckFailed(f"{where}={spec}: slime reads only .jsonl and .parquet files, not {path.suffix or 'no suffix'}",
                          f"convert it to JSONL (one JSON object per line) named *.jsonl")
    lines = _first_lines(path, FIRST_LINES)
    if not lines:
        raise CheckFailed(f"{where}={spec}: {path} is empty", "point it at a file holding prompts")
    for number, text in lines:
        try:
            row = json.loads(text)
        except ValueError as exc:
            raise CheckFailed(f"{where}={spec}: line {number} of {path} is not JSON ({exc})",
                              "each line must be one JSON object (JSONL)")
        if not isinstance(row, dict):
            raise CheckFailed(f"{where}={spec}: line {number} of {path} is a JSON {type(row).__name__}, not an object",
                              "each line must be one JSON object holding the prompt and label keys")
        for flag, key in keys:
            if key not in row:
                have = ", ".join(sorted(map(str, row))[:12]) or "none"
                raise CheckFailed(
                    f"{where}={spec}: line {number} of {path} has no key '{key}' ({flag} {key}); its keys: {have}",
                    f"set {flag} to the key holding that field (args.{flag[2:].replace('-', '_')}=... or "
                    f"extra_args), or fix the data")
    return f"{path} ({len(lines)} first lines have {', '.join(k for _, k in keys)})"


def check_prompt_data(ctx: Context) -> str:
    """--prompt-data / --eval-prompt-data exist, are JSONL and carry the configured keys."""
    c = ctx.c
    flags = plan_flags(ctx.plan)
    none = c["sandbox"]["backend"] == "none"
    input_key = _one(flags, "--input-key") or DEFAULT_INPUT_KEY
    label_key = _one(flags, "--label-key")
    done: List[str] = []
    prompt = _one(flags, "--prompt-data")
    global_dataset = "--disable-rollout-global-dataset" not in flags
    if prompt is None:
        if none and global_dataset:
            raise CheckFailed(
                "sandbox=none reads its prompts from slime's global dataset, but no --prompt-data is given",
                "give the prompts: args.prompt_data=/path/train.jsonl (or extra_args='[--prompt-data,/path/train.jsonl]'),"
                " or rollout.global_dataset=false with a rollout hook that brings its own data")
    else:
        keys = [("--input-key", input_key)] + ([("--label-key", label_key)] if label_key else [])
        done.append(check_jsonl("--prompt-data", prompt, keys))
    eval_config = _one(flags, "--eval-config")
    evals = flags.get("--eval-prompt-data")
    if eval_config is not None:
        # slime: --eval-config overrides --eval-prompt-data.
        if not Path(eval_config).is_file():
            raise CheckFailed(f"--eval-config={eval_config} does not exist",
                              "point --eval-config at the eval datasets' YAML file")
        done.append(f"eval datasets from {eval_config}")
    elif evals is not None:
        if not evals or len(evals) % 2:
            raise CheckFailed(
                f"--eval-prompt-data {' '.join(evals)}: takes name/path pairs, got {len(evals)} value(s)",
                "give each eval set as a name then a path, e.g. args.eval_prompt_data='[aime,/data/aime.jsonl]'")
        eval_input = _one(flags, "--eval-input-key") or input_key
        eval_label = _one(flags, "--eval-label-key") or label_key
        in_flag = "--eval-input-key" if "--eval-input-key" in flags else "--input-key"
        label_flag = "--eval-label-key" if "--eval-label-key" in flags else "--label-key"
        keys = [(in_flag, eval_input)] + ([(label_flag, eval_label)] if eval_label else [])
        for name, spec in zip(evals[0::2], evals[1::2]):
            done.append(f"eval {name}: " + check_jsonl(f"--eval-prompt-data {name}", spec, keys))
    elif none and "--eval-interval" in flags:
        raise CheckFailed(
            f"eval.interval={_one(flags, '--eval-interval')} but no --eval-prompt-data: with sandbox=none there "
            "are no OpenClaw eval tasks, so slime has nothing to evaluate",
            "give eval data (args.eval_prompt_data='[name,/path/eval.jsonl]' or extra_args) or set eval.interval=null")
    if not done:
        raise NotApplicable("no --prompt-data or --eval-prompt-data in the trainer's flags")
    return "; ".join(done)
