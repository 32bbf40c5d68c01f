"""clawgym explain KEY... [OVERRIDE...]: what a config key means, its value, and where the value came from.

The overrides are those of a run (python train.py ... takes the same): group choices such as
model=qwen3_4b, key=value settings, +experiment=NAME. For each KEY it prints the key's help (the
comment above it in clawgym/config/schema.py), its type, its resolved value (and the value as typed when
that differs), and every layer that set it, first to last (the last one wins): the schema default,
conf/<group>/<option>.yaml, a global file (trainer=slime), an experiment (+experiment=NAME, or one
written by clawgym import, with its script), config.yaml, the command line. A value that
interpolates other keys is followed into each of them.

    clawgym explain rollout.temperature perf.tensor_parallel model=qwen3_4b rollout.temperature=0.8
    python train.py --explain rollout.temperature model=qwen3_4b rollout.temperature=0.8

An unknown key exits 2 naming the closest key. Secret values are never shown.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, List, Mapping, Optional, Sequence, Tuple

from clawgym.common.exit_codes import DONE, REFUSED


def fmt_value(value: Any) -> str:
    """A value as YAML writes it (``false``, ``null``, ``1.0e-06``), as a user types it back."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value if value and value.strip() == value else json.dumps(value)
    if isinstance(value, (list, dict)):
        return json.dumps(value, default=str)
    return str(value)


def split_args(items: Sequence[str]) -> Tuple[List[str], List[str]]:
    """(keys, overrides): an item with ``=`` (or a ``~key`` deletion) is an override."""
    keys, overrides = [], []
    for item in items:
        (overrides if "=" in item or item.startswith("~") else keys).append(item)
    return keys, overrides


def _secret(key: str) -> bool:
    from clawgym.common.secrets import is_secret_name, names_secret

    last = key.rpartition(".")[2]
    if key.startswith(("extra_env.", "sandbox.env.")):
        return is_secret_name(last)  # a variable: named like a key, token or password
    return names_secret(last) and not last.endswith("_name")  # a flag's dest (kuberay.secret_name is a name)


def _masked(key: str, value: Any) -> Any:
    """``value`` with every secret-named child under ``key`` (``extra_env.WANDB_API_KEY`` below
    ``extra_env``, ``args.*_token``...) replaced by ``<redacted>``: a map is shown whole."""
    from clawgym.common.secrets import is_secret_name

    if isinstance(value, Mapping):
        # A child of a free-form map is masked by its name too (``args.hub_token``), as the launch masks it.
        return {k: ("<redacted>" if (_secret(f"{key}.{k}") or is_secret_name(str(k))) and v not in (None, "", "???") else _masked(f"{key}.{k}", v))
                for k, v in value.items()}
    return value


def _unknown(key: str) -> str:
    """The refusal of a key the schema does not define: the closest key, or the key that owns a
    trainer flag of that name (``perf.tensor_model_parallel_size`` -> ``perf.tensor_parallel``)."""
    from clawgym.config.keys import closest

    last = key.rpartition(".")[2]
    owner = None
    try:
        from clawgym.trainer.flagmap import owned_dests

        found = owned_dests().get(last)
        owner = found.key if found is not None else None
    except Exception:  # noqa: BLE001 - the flag registry is a hint here, never a blocker
        owner = None
    if owner:
        hint = f"{key.rpartition('.')[2]} is the trainer's flag --{last.replace('_', '-')}; the key that sets it " \
               f"is {owner}: clawgym explain {owner}"
    else:
        near = closest(key)
        hint = f"did you mean {near[0]}?" if near else "clawgym explain lists nothing close; python train.py --cfg job " \
                                                       "shows every key"
    return f"clawgym explain: {key} is not a config key; {hint}"


def _chain(origin: Any, secrets: List[str], indent: str, secret: bool) -> List[str]:
    from clawgym.config.provenance import OVERRIDE
    from clawgym.common.secrets import redact

    def show(value: Any) -> str:
        return "<redacted>" if secret and value not in (None, "", "???") else \
            redact(fmt_value(_masked(origin.key, value)), secrets)

    out = []
    width = max((len(s.kind) for s in origin.steps), default=0)
    for n, step in enumerate(origin.steps):
        last = n == len(origin.steps) - 1
        where = redact(step.where, secrets) if step.kind != OVERRIDE else redact(step.where.split("=", 1)[0], secrets)
        value = show(step.value) if step.kind != OVERRIDE else (
            "<redacted>" if secret else redact(step.typed or "", secrets))
        line = f"{indent}{'->' if last else '  '} {step.kind:<{width}}  {value}   ({where}"
        if step.kind == OVERRIDE:
            line = f"{indent}{'->' if last else '  '} {step.kind:<{width}}  {value}   (typed on the command line"
        line += f"; imported from {step.note})" if step.note else ")"
        out.append(line)
    for ref in origin.refs:
        out.append(f"{indent}   ${{{ref.key}}} = {show(ref.resolved)}, from:")
        out += _chain(ref, secrets, indent + "     ", secret or _secret(ref.key))
    return out


def explain_key(prov: Any, key: str, secrets: List[str]) -> str:
    from clawgym.config.keys import keys
    from clawgym.common.secrets import redact

    info = keys().get(key)
    origin = prov.origin(key)
    secret = _secret(key)

    def show(value: Any) -> str:
        return "<redacted>" if secret and value not in (None, "", "???") else \
            redact(fmt_value(_masked(key, value)), secrets)

    lines = [f"{key}" + (f"  ({info.type})" if info is not None else "  (below an open map: free-form)")]
    if info is not None and info.help:
        lines.append(f"  {info.help}")
    value = f"  value: {show(origin.resolved)}" if not origin.error else \
        f"  value: {show(origin.raw)} (does not resolve outside a run: {origin.error})"
    last = origin.steps[-1] if origin.steps else None
    if last is not None and last.typed is not None and not secret and last.typed != fmt_value(origin.resolved):
        value += f"   (typed {redact(last.typed, secrets)})"
    if isinstance(origin.raw, str) and "${" in origin.raw and not origin.error:
        value += f"   = {redact(origin.raw, secrets)}"
    lines.append(value)
    if origin.steps:
        lines.append("  set by, first to last (the last one wins):")
        lines += _chain(origin, secrets, "    ", secret)
    return "\n".join(lines)


def explain(items: Sequence[str], environ: Optional[dict] = None) -> Tuple[str, str, int]:
    """(stdout, stderr, exit code) of ``clawgym explain ITEMS``."""
    from clawgym.config.keys import is_known

    keys_, overrides = split_args(items)
    if not keys_:
        return "", "clawgym explain: name at least one key, e.g. clawgym explain rollout.temperature", REFUSED
    unknown = [k for k in keys_ if not is_known(k)]
    if unknown:
        return "", "\n".join(_unknown(k) for k in unknown), REFUSED
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from clawgym.config import provenance
    from clawgym.config.compose import to_plain
    from clawgym.common.secrets import known_secrets

    try:
        prov = provenance.compose(overrides)
    except (HydraException, OmegaConfBaseException) as exc:
        from clawgym.config.keys import composition_report

        return "", composition_report(exc), REFUSED
    try:
        plain: Any = to_plain(prov.cfg)
    except OmegaConfBaseException:
        plain = None
    secrets = known_secrets(plain, os.environ if environ is None else environ)
    missing = [k for k in keys_ if not prov.has(k)]
    from clawgym.supervisor.rules import explain_lines

    out = ["\n".join([explain_key(prov, k, secrets), *explain_lines(k, plain)]) for k in keys_ if k not in missing]
    err = [f"clawgym explain: {k} is not set in this config (an open map holds only what was given)" for k in missing]
    return "\n\n".join(out) + ("\n" if out else ""), "\n".join(err), REFUSED if missing else DONE


def main(items: Sequence[str]) -> int:
    out, err, code = explain(items)
    if out:
        sys.stdout.write(out)
    if err:
        print(err, file=sys.stderr)
    return code


def run(args: argparse.Namespace) -> int:
    return main(list(args.items))


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("explain", help="what a config key means, its value, and where the value came from",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("items", nargs="*", metavar="KEY|OVERRIDE", help="keys to explain and the overrides of the run")
    p.set_defaults(func=run, intermixed="items")
