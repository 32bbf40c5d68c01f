"""Trainer flags: the flavour's flag registry judges args.* and extra_args."""

from __future__ import annotations

from typing import Any, Dict, Sequence

from clawgym.validate.secrets import secret_flags_given
from clawgym.validate.core import Collector


def _registry(v: Collector) -> Any:
    """The flag registry of the config's trainer flavour (None for an unknown flavour, reported by
    rule_trainer_flavour_known). A missing or broken data file is a broken install, not a config
    problem: its RegistryError propagates."""
    from clawgym.registry import FLAVOURS, load_registry

    flavour = (v.c.get("trainer") or {}).get("flavour", "clawgym")
    if flavour not in FLAVOURS:
        return None
    return load_registry(flavour)


def _other_flavour_has(flavour: str, *, dest: str = "", option: str = "") -> bool:
    from clawgym.registry import FLAVOURS, RegistryError, load_registry

    for other in FLAVOURS:
        if other == flavour:
            continue
        try:
            reg = load_registry(other)
        except RegistryError:
            continue
        if dest:
            from clawgym.trainer.args import lookup

            if lookup(reg, dest) is not None:
                return True
        if option and reg.by_option(option) is not None:
            return True
    return False


def _suggest(reg: Any, names: Sequence[str], *, as_args: bool) -> str:
    """Suggested names, each as the user would set it: ``args.<name>`` (or the flag), or the
    group key that owns it (``sglang.mem_fraction_static``)."""
    from clawgym.trainer.flagmap import owned_dests
    from clawgym.trainer.args import lookup

    owned = owned_dests(reg.flavour)
    out = []
    for name in names:
        flag = reg.by_option(name) if name.startswith("-") else lookup(reg, name)
        owner = owned.get(flag.dest) if flag is not None else None
        shown = f"args.{name}" if as_args else name
        out.append(f"{owner.key} ({flag.flag})" if owner else shown)
    return ", ".join(dict.fromkeys(out))


def rule_trainer_flavour_known(v: Collector) -> None:
    from clawgym.registry import FLAVOURS

    flavour = (v.c.get("trainer") or {}).get("flavour", "clawgym")
    if flavour not in FLAVOURS:
        v.add("trainer-flavour-known", ["trainer.flavour"], f"the trainer flavours are {', '.join(FLAVOURS)}",
              f"choose trainer={' or trainer='.join(FLAVOURS)} (the group, not trainer.flavour)")


def rule_curated_flags_exist_in_trainer(v: Collector) -> None:
    """Under upstream slime, a curated key must not emit a flag only the ClawGym fork has."""
    from clawgym.trainer.flagmap import Context, fork_only_rows, upstream_only_rows

    if (v.c.get("trainer") or {}).get("flavour", "clawgym") == "clawgym":
        for row in upstream_only_rows():
            value = row.emitted(v.c, Context(use_wandb=True))
            if value is None or value is False:
                continue
            v.add("trainer-flag-upstream-only", [row.key, "trainer.flavour"],
                  f"{row.flag} (from {row.key}) exists only in upstream slime; the ClawGym fork "
                  "(trainer=clawgym) has no such flag", f"set {row.key}=false, or choose trainer=slime")
    if (v.c.get("trainer") or {}).get("flavour", "clawgym") != "slime":
        return
    for row in fork_only_rows():
        value = row.emitted(v.c, Context(use_wandb=True))
        if value is None or value is False:
            continue
        off = "false" if row.kind == "switch" else "null"
        v.add("trainer-flag-fork-only", [row.key, "trainer.flavour"],
              f"{row.flag} (from {row.key}) exists only in the ClawGym fork; upstream slime (trainer=slime) "
              "has no such flag and would not do what it asks",
              f"set {row.key}={off}, or choose trainer=clawgym")


def rule_args(v: Collector) -> None:
    """``args.<dest>``: a real flag of the flavour, not owned by a key, with a value of its type."""
    from clawgym.trainer.flagmap import owned_dests
    from clawgym.common.secrets import names_secret, secret_option, secret_options
    from clawgym.trainer.args import check_arg, looks_like_flag, lookup

    user_args = v.c.get("args") or {}
    if not user_args:
        return
    reg = _registry(v)
    if reg is None:
        return
    flavour = reg.flavour
    owned = owned_dests(flavour)
    secret_opts = set(secret_options())
    named_by: Dict[str, str] = {}
    for dest, value in user_args.items():
        key = f"args.{dest}"
        flag = lookup(reg, dest)
        if flag is not None and flag.dest in named_by:
            first = named_by[flag.dest]
            v.add("args-set-twice", [f"args.{first}", key],
                  f"args.{first} and {key} both set {flag.dest} ({', '.join(flag.option_strings)})",
                  f"keep one of args.{first} and {key}")
            continue
        if flag is not None:
            named_by[flag.dest] = dest
        if names_secret(dest) or ("--" + dest.replace("_", "-")) in secret_opts or \
                (flag is not None and set(flag.option_strings) & secret_opts):
            v.add("no-secrets-in-argv", [key], "secrets never travel in argv, config files or plans (slime copies "
                  "argv into W&B)", _secret_fix(key, flag), redact=True)
            continue
        hidden = _flag_like(value, looks_like_flag)
        if hidden is not None and secret_option(hidden) is not None:
            v.add("no-secrets-in-argv", [key], f"{key} smuggles a secret flag into argv; secrets never travel in "
                  "argv, config files or plans",
                  _secret_fix(f"{secret_option(hidden)} from {key}", reg.by_option(secret_option(hidden) or "")),
                  redact=True)
            continue
        if hidden is not None:
            v.add("args-value-looks-like-flag", [key],
                  f"{key} holds a value that starts like an option ({hidden!r}); it would "
                  "reach the trainer's argv as a flag of its own, past clawgym's checks (a secret, an owned flag)",
                  f"give {key} plain values; set another flag with args.<dest> or its config key")
            continue
        if flag is not None and flag.dest in owned:
            owner = owned[flag.dest]
            how = "is derived from" if owner.kind == "derived" else "is set from"
            v.add("args-owned-by-key", [key], f"the trainer flag of {dest} {how} {owner.key}; one setting per flag",
                  f"remove {key} and set {owner.key} instead")
            continue
        if flag is None:
            if flavour == "slime" and _other_flavour_has(flavour, dest=dest):
                v.add("trainer-flag-fork-only", [key, "trainer.flavour"],
                      f"{dest} exists only in the ClawGym fork; upstream slime (trainer=slime) has no such flag",
                      f"remove {key}, or choose trainer=clawgym")
            elif flavour == "clawgym" and _other_flavour_has(flavour, dest=dest):
                v.add("trainer-flag-upstream-only", [key, "trainer.flavour"],
                      f"{dest} exists only in upstream slime; the ClawGym fork (trainer=clawgym) has no such flag",
                      f"remove {key}, or choose trainer=slime")
            else:
                near = reg.closest(dest)
                hint = f"did you mean {_suggest(reg, near, as_args=True)}? " if near else ""
                v.add("args-unknown-flag", [key], f"trainer={flavour} has no flag with dest {dest!r}",
                      f"{hint}`clawgym flags --trainer {flavour} PATTERN` lists the real ones; fix or remove {key}")
            continue
        problem = check_arg(reg, dest, value)
        if problem is None:
            continue
        if problem.code == "type":
            v.add("args-type", [key], problem.rule, problem.fix)
        elif problem.code == "choices":
            v.add("args-choices", [key], problem.rule, problem.fix)
        elif problem.code == "switch":
            v.add("args-switch-takes-bool", [key], problem.rule, problem.fix)
        elif problem.code == "nargs":
            v.add("args-nargs-takes-list", [key], problem.rule, problem.fix)
        else:
            v.add("args-not-settable", [key], problem.rule, problem.fix)


def _flag_like(value: Any, looks_like_flag: Any) -> Any:
    """The first string of a value (lists included) that argparse would read as an option, or None."""
    items = value if isinstance(value, list) else [value]
    for item in items:
        if isinstance(item, list):
            found = _flag_like(item, looks_like_flag)
            if found is not None:
                return found
        elif isinstance(item, str) and looks_like_flag(item.strip()):
            return item.strip().split("=", 1)[0]
    return None


def _secret_fix(key: str, flag: Any) -> str:
    """How to give a secret flag its value: from the environment at launch, or not at all."""
    opts = set(flag.option_strings) if flag is not None else set()
    if "--wandb-key" in opts:
        return f"remove {key} and export WANDB_API_KEY (or WANDB_KEY) in the launcher's environment instead"
    if "--sglang-api-key" in opts:
        return f"remove {key} and export SGLANG_API_KEY in the launcher's environment instead"
    return (f"remove {key}: clawgym passes only the W&B and SGLang API keys, read from the launcher's environment "
            "at launch; a trainer flag holding another secret would put it in argv (and W&B)")


def rule_extra_args(v: Collector) -> None:
    """``extra_args``: real flags of the flavour, values of their type, not owned by a key or ``args``."""
    from clawgym.trainer.flagmap import owners
    from clawgym.trainer.args import check_extra_values, split_extra_args

    tokens = v.c["extra_args"]
    if not tokens:
        return
    orphans, occurrences = split_extra_args(tokens)
    # A secret flag, an abbreviation of one (its value is never echoed), inside one element
    # ('--wandb-key VALUE') or as --flag=VALUE.
    if secret_flags_given(tokens):
        v.add("no-secrets-in-argv", ["extra_args"], "secrets never travel in argv (slime copies argv into W&B)",
              "remove that flag from extra_args: export WANDB_API_KEY / SGLANG_API_KEY in the launcher's environment "
              "instead (other secret flags cannot be passed)", redact=True)
        return
    if orphans:
        v.add("extra-args-value-without-flag", ["extra_args"],
              f"{orphans} come before any flag; every value must follow the flag it belongs to",
              "start extra_args with a --flag, e.g. extra_args=[--seed,7]")
    reg = _registry(v)
    if reg is None:
        return
    flavour = reg.flavour
    owned = owners(flavour)
    from clawgym.trainer.args import lookup

    arg_dests = {}
    for name in v.c.get("args") or {}:
        named = lookup(reg, name)
        if named is not None:
            arg_dests[named.dest] = name
    seen: Dict[str, int] = {}
    for occ in occurrences:
        opt = occ.option
        flag = reg.by_option(opt)
        if flag is None:
            if flavour == "slime" and _other_flavour_has(flavour, option=opt):
                v.add("trainer-flag-fork-only", ["extra_args", "trainer.flavour"],
                      f"{opt} exists only in the ClawGym fork; upstream slime (trainer=slime) has no such flag",
                      f"remove {opt} from extra_args, or choose trainer=clawgym")
            elif flavour == "clawgym" and _other_flavour_has(flavour, option=opt):
                v.add("trainer-flag-upstream-only", ["extra_args", "trainer.flavour"],
                      f"{opt} exists only in upstream slime; the ClawGym fork (trainer=clawgym) has no such flag",
                      f"remove {opt} from extra_args, or choose trainer=slime")
            else:
                prefixed = sorted(o for o in reg.option_strings if o.startswith(opt)) if opt.startswith("--") else []
                near = prefixed[:3] if len(prefixed) == 1 else reg.closest(opt)
                what = "is an abbreviation; clawgym takes whole flag names only" if len(prefixed) == 1 \
                    else f"is not a flag of trainer={flavour}"
                hint = f"did you mean {_suggest(reg, near, as_args=False)}? " if near else ""
                v.add("extra-args-unknown-flag", ["extra_args"], f"{opt} {what}",
                      f"{hint}`clawgym flags --trainer {flavour} PATTERN` lists the real ones; fix extra_args")
            continue
        if opt in owned or flag.flag in owned:
            owner = owned.get(opt) or owned[flag.flag]
            v.add("extra-args-not-generated", ["extra_args"],
                  f"{opt} is generated from {owner.key}; passing it again would be silently overridden",
                  f"remove {opt} from extra_args and set {owner.key} instead")
            continue
        if flag.dest in arg_dests:
            name = arg_dests[flag.dest]
            v.add("extra-args-set-in-args", ["extra_args", f"args.{name}"],
                  f"{opt} sets {flag.dest}, which args.{name} sets too; one setting per flag",
                  f"remove {opt} from extra_args (args.{name} is the typed way)")
            continue
        problem = check_extra_values(flag, occ)
        if problem is not None:
            v.add("extra-args-value", ["extra_args"], problem.rule, problem.fix)
        if flag.action not in ("append", "append_const", "extend", "count"):
            seen[flag.dest] = seen.get(flag.dest, 0) + 1
            if seen[flag.dest] == 2:
                v.add("extra-args-once", ["extra_args"],
                      f"{opt} sets {flag.dest} more than once; the trainer keeps only the last",
                      f"keep one {opt} in extra_args")
