"""``clawgym flags [--trainer NAME] [PATTERN] [--json]``: the trainer's flags, from its registry.

Lists every flag of a trainer flavour's parser (Megatron, slime, ``--sglang-*``, ``--router-*``)
with its dest (the key of ``args.<dest>``), type, default, choices, the first line of its help,
and the clawgym key that owns it when a config group sets it (set that key, not ``args``).
PATTERN filters by option string or dest: a substring (``-`` and ``_`` are the same), or a
glob such as ``'sglang-*-size'`` (leading dashes are optional; a pattern that starts with one
goes after ``--``). ``--json`` prints a JSON list instead of the table.

    clawgym flags warmup
    clawgym flags --trainer slime 'sglang-ep*' --json
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import sys
from typing import Any, Dict, List, Optional

from clawgym.registry import FLAVOURS, Flag, Registry, RegistryError, load_registry
from clawgym.common.exit_codes import REFUSED

#: Longest help text shown in the table (the JSON has it whole).
MAX_HELP = 60


def _norm(text: str) -> str:
    return text.lower().replace("_", "-")


def matches(flag: Flag, pattern: Optional[str]) -> bool:
    """Whether a flag's option strings or dest match PATTERN (substring, or glob with * ? [)."""
    if not pattern:
        return True
    names = [*flag.option_strings, flag.dest]
    pat = _norm(pattern)
    if any(ch in pattern for ch in "*?["):
        return any(fnmatch.fnmatchcase(_norm(n), pat) or fnmatch.fnmatchcase(_norm(n).lstrip("-"), pat.lstrip("-"))
                   for n in names)
    return any(pat.lstrip("-") in _norm(n) for n in names)


def owner_keys(flavour: str) -> Dict[str, str]:
    """Option string -> the clawgym key that owns it."""
    from clawgym.trainer.flagmap import owners

    return {opt: owner.key for opt, owner in owners(flavour).items()}


def flag_records(reg: Registry, pattern: Optional[str] = None) -> List[Dict[str, Any]]:
    """One JSON object per matching flag: the registry's fields plus ``flag`` and ``owner``."""
    owned = owner_keys(reg.flavour)
    out = []
    for flag in reg.actions:
        if not matches(flag, pattern):
            continue
        record = flag.to_json()
        record["flag"] = flag.flag
        record["owner"] = next((owned[o] for o in flag.option_strings if o in owned), None)
        out.append(record)
    return out


def _short(value: Any, limit: int = 28) -> str:
    if value is None:
        return "-"
    text = json.dumps(value) if isinstance(value, (list, dict, bool)) else str(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _set_with(record: Dict[str, Any]) -> str:
    """How a user sets a flag no key owns: ``args.<dest>``, or for a secret flag where its value comes from."""
    from clawgym.common.secrets import names_secret, secret_options

    opts = set(record["option_strings"])
    if names_secret(record["dest"]) or opts & set(secret_options()):
        if "--wandb-key" in opts:
            return "env WANDB_API_KEY (secret)"
        if "--sglang-api-key" in opts:
            return "env SGLANG_API_KEY (secret)"
        return "not settable (secret)"
    return "args." + record["dest"]


def format_table(reg: Registry, records: List[Dict[str, Any]]) -> str:
    from clawgym.commands.diff import render_table

    rows = []
    for r in records:
        kind = r["type"] or ("bool" if r["action"] in ("store_true", "store_false", "BooleanOptionalAction") else "str")
        if r["nargs"] is not None:
            kind += f" nargs={r['nargs']}"
        if r["action"] not in ("store", "store_true", "store_false"):
            kind += f" ({r['action']})"
        help_text = (r["help"] or "").strip()
        if len(help_text) > MAX_HELP:
            help_text = help_text[:MAX_HELP - 1] + "…"
        flag = ", ".join(r["option_strings"])
        # Enum-valued flags: show what is typed on the command line, not the object's repr.
        default = r["cli_default"] if r.get("cli_default") is not None else r["default"]
        choices = r["cli_choices"] if r.get("cli_choices") is not None else r["choices"]
        rows.append((flag, r["dest"], kind, _short(default), _short(choices), help_text or "-",
                     r["owner"] or _set_with(r)))
    meta = reg.meta
    head = (f"trainer={reg.flavour}: {len(records)} of {len(reg.actions)} flags"
            f" ({meta.get('option_string_count', '?')} option strings; {str(meta.get('description', '')).split(';')[0]})")
    if not rows:
        return head + "\n  (no flag matches)"
    return "\n".join([head, render_table(("flag", "dest", "type", "default", "choices", "help", "set with"), rows)])


def run(args: argparse.Namespace) -> int:
    try:
        reg = load_registry(args.trainer)
    except RegistryError as exc:
        print(f"clawgym flags: {exc}", file=sys.stderr)
        return REFUSED
    records = flag_records(reg, args.pattern)
    text = json.dumps(records, indent=1) if args.json else format_table(reg, records)
    try:
        print(text)
    except BrokenPipeError:
        # Piped into head or less and closed early: not an error.
        sys.stderr.close()
        return 0
    return 0 if records or args.json else 1


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("flags", help="list the trainer's flags (for args.<dest>)", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("pattern", nargs="?", default=None, metavar="PATTERN",
                   help="substring or glob of an option string or dest")
    p.add_argument("--trainer", choices=FLAVOURS, default=FLAVOURS[0],
                   help=f"trainer flavour (default: {FLAVOURS[0]})")
    p.add_argument("--json", action="store_true", help="print a JSON list of flag objects")
    p.set_defaults(func=run)
