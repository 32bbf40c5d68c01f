"""The values the trainer's own startup code will see, read from a resolved config.

Trainer rules reason in the trainer's terms (``tensor_model_parallel_size``,
``micro_batch_size``, ``sglang_enable_dp_attention``), whoever sets them: a curated key
(``perf.tensor_parallel``), ``args.<dest>``, a flag in ``extra_args``, or nobody (the
trainer's default, from the flavour's flag registry). :class:`TrainerArgs` answers that
for one option string, flavour-neutral (the fork and upstream spell some dests differently,
e.g. ``sglang_data_parallel_size`` / ``sglang_dp_size``; their option strings agree).

A curated key left null gives the trainer's default, as :func:`clawgym.trainer.effective.effective` reads it.
Pure and cheap: one registry lookup per question, cached per config.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Tuple


class TrainerArgs:
    """What ``parse_args`` would put into the Namespace for an option, from a resolved config."""

    def __init__(self, c: Mapping[str, Any]):
        from clawgym.registry import FLAVOURS, load_registry

        self.c = c
        flavour = str((c.get("trainer") or {}).get("flavour", "clawgym"))
        self.flavour = flavour
        self.reg = load_registry(flavour) if flavour in FLAVOURS else None
        self._cache: Dict[str, Any] = {}
        self._owned: Optional[Dict[str, Any]] = None
        self._args: Optional[Dict[str, List[Tuple[str, Any]]]] = None

    def _args_of(self, dest: str) -> List[Tuple[str, Any]]:
        """The ``args`` entries (name, value) that set ``dest``, in config order, values not None:
        indexed once per config, not looked up again for every option asked about."""
        if self._args is None:
            from clawgym.trainer.args import lookup

            index: Dict[str, List[Tuple[str, Any]]] = {}
            for name, value in (self.c.get("args") or {}).items():
                named = lookup(self.reg, name) if self.reg is not None else None
                if value is not None and named is not None:
                    index.setdefault(named.dest, []).append((name, value))
            self._args = index
        return self._args.get(dest, [])

    def _owned_rows(self) -> Dict[str, Any]:
        """dest -> the flagmap row that emits it."""
        if self._owned is None:
            from clawgym.trainer.flagmap import rows

            out: Dict[str, Any] = {}
            for row in rows(self.flavour):
                dest = self.reg.dest_of(row.flag) if self.reg is not None else None
                if dest is not None:
                    out.setdefault(dest, row)
            self._owned = out
        return self._owned

    def source(self, option: str) -> Optional[str]:
        """The config key that sets ``option`` (``perf.tensor_parallel``, ``args.x``, ``extra_args``), or None."""
        flag = self.reg.by_option(option) if self.reg is not None else None
        if flag is None:
            return None
        row = self._owned_rows().get(flag.dest)
        if row is not None:
            return row.key
        for name, _ in self._args_of(flag.dest):
            return f"args.{name}"
        for token in self.c.get("extra_args") or []:
            if str(token).split("=", 1)[0] in flag.option_strings:
                return "extra_args"
        return None

    def get(self, option: str) -> Any:
        """The value of ``option``'s dest after parsing (before the trainer's validation rewrites it)."""
        if option in self._cache:
            return self._cache[option]
        value = self._get(option)
        self._cache[option] = value
        return value

    def _get(self, option: str) -> Any:
        from clawgym.trainer.flagmap import Context, get_key
        from clawgym.trainer.args import convert, dest_value

        flag = self.reg.by_option(option) if self.reg is not None else None
        if flag is None:
            return None
        row = self._owned_rows().get(flag.dest)
        if row is not None:
            emitted = row.emitted(self.c, Context(use_wandb=True))
            if row.kind in ("switch", "inverse_switch"):
                own = self.reg.by_option(row.flag)
                if own is not None and own.action == "store_false":
                    return not emitted
                return bool(emitted) if emitted is not None else flag.default
            if emitted is not None and row.compute is None:
                return emitted
            if emitted is not None:
                return emitted
            if row.kind == "value":
                try:
                    if get_key(self.c, row.key) is not None:
                        return get_key(self.c, row.key)
                except (KeyError, TypeError):
                    pass
        found: Any = _UNSET
        for name, value in self._args_of(flag.dest):
            found = dest_value(self.reg, name, value)
        tokens = [str(t) for t in self.c.get("extra_args") or []]
        for i, token in enumerate(tokens):
            opt, _, inline = token.partition("=")
            if opt not in flag.option_strings:
                continue
            action = self.reg.by_option(opt)
            if action is None:
                continue
            if action.action == "store_true":
                found = True
            elif action.action == "store_false":
                found = False
            elif action.action == "BooleanOptionalAction":
                found = not opt.startswith("--no-")
            elif inline or (i + 1 < len(tokens)):
                ok, conv = convert(action, inline or tokens[i + 1])
                if ok:
                    found = conv
        if found is not _UNSET:
            return found
        if flag.cli_default is not None:
            return flag.cli_default
        return flag.default


_UNSET = object()


def trainer_args(v: Any) -> TrainerArgs:
    """The collector's view, built once per validation."""
    view = getattr(v, "_trainer_args", None)
    if view is None:
        view = TrainerArgs(v.c)
        v._trainer_args = view
    return view
