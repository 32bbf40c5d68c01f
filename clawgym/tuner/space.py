"""The search space, from Hydra's override grammar (as hydra-optuna-sweeper reads it).

``key=tag(log, interval(a, b))`` -> a log-uniform float (int when both ends are ints),
``key=interval(a, b)`` -> uniform, ``key=choice(x, y)`` and ``key=x,y`` -> categorical,
``key=range(a, b, step=s)`` -> stepped ints (floats when any bound is a float) with Hydra's
``range`` meaning: ``b`` excluded, so the grid sampler runs exactly the jobs ``-m`` would.
Anything else is a fixed override every trial gets. ``hydra.sweeper.params`` (a mapping in a
config file) adds entries; the command line wins a key named in both.

Pure: no Optuna state, no I/O; a trial's overrides are ``overrides(params)``. Every override that
cannot be searched is reported at once (a secret-named key never is: Optuna stores sampled values).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Sequence

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, Override, RangeSweep, Transformer
from clawgym.common.secrets import is_secret_name, names_secret
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution


class SpaceError(ValueError):
    """A search-space override Optuna cannot sample; ``str()`` names the key and the fix."""


@dataclass
class SearchSpace:
    # key -> distribution, in the order the user gave them.
    params: Dict[str, BaseDistribution] = field(default_factory=dict)
    # Overrides every trial gets unchanged (``key=value``, group choices, ``+key=...``).
    fixed: List[str] = field(default_factory=list)
    # key -> the override's prefix (``+`` / ``++``) for swept keys that add a key.
    prefixes: Dict[str, str] = field(default_factory=dict)

    def overrides(self, values: Mapping[str, Any]) -> List[str]:
        """One trial's overrides: the fixed ones, then each swept key's sampled value."""
        return [*self.fixed, *(f"{self.prefixes.get(k, '')}{k}={format_value(values[k])}" for k in self.params)]

    def grid(self) -> Dict[str, List[Any]]:
        """Every value of every swept key, for Optuna's grid sampler; SpaceError for an interval."""
        out: Dict[str, List[Any]] = {}
        for key, dist in self.params.items():
            if isinstance(dist, CategoricalDistribution):
                out[key] = list(dist.choices)
            elif isinstance(dist, (IntDistribution, FloatDistribution)) and dist.step is not None:
                n = int(round((dist.high - dist.low) / dist.step)) + 1
                out[key] = [_clean(dist.low + i * dist.step) for i in range(n)]
            else:
                raise SpaceError(f"hydra.sweeper.sampler=grid: {key} is an interval, which has no grid\n"
                                 f"  fix: give {key} a choice(...) or range(...), or use sampler=tpe/random")
        return out


def format_value(value: Any) -> str:
    """A sampled value as an override writes it (``1e-06``, ``0.8``, ``4``, ``null``, ``true``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(_clean(value))
    return str(value)


def _clean(x: Any) -> Any:
    """Drop float noise from stepped values (0.1 * 3 -> 0.3)."""
    return float(f"{x:.12g}") if isinstance(x, float) else x


def _distribution(o: Override) -> BaseDistribution:
    key = o.key_or_group
    value = o.value()
    if o.is_choice_sweep() or (o.is_sweep_override() and isinstance(value, ChoiceSweep)):
        choices = list(o.sweep_iterator(transformer=Transformer.encode))
        for c in choices:
            if not isinstance(c, (str, int, float, bool, type(None))):
                raise SpaceError(f"{key}: a choice must be a plain value (str, number, bool, null), got {c!r}")
        return CategoricalDistribution(choices)
    if o.is_range_sweep():
        assert isinstance(value, RangeSweep)
        if value.shuffle:
            return CategoricalDistribution(list(o.sweep_iterator(transformer=Transformer.encode)))
        start, stop, step = value.start, value.stop, value.step if value.step is not None else 1
        floats = any(isinstance(v, float) for v in (start, stop, step))
        n = int(math.ceil((stop - start) / step))
        if n < 1 or step <= 0:
            raise SpaceError(f"{key}=range({start}, {stop}, step={step}) holds no value\n"
                             f"  fix: a range with start < stop and step > 0, e.g. range(4, 16, step=4)")
        last = start + (n - 1) * step
        if floats:
            return FloatDistribution(float(start), float(_clean(float(last))), step=float(step))
        return IntDistribution(int(start), int(last), step=int(step))
    if o.is_interval_sweep():
        assert isinstance(value, IntervalSweep)
        log = "log" in (value.tags or set())
        low, high = value.start, value.end
        if any(isinstance(v, float) and not math.isfinite(v) for v in (low, high)):
            raise SpaceError(f"{key}=interval({low}, {high}): Optuna samples between two finite ends\n"
                             f"  fix: give both ends as numbers, e.g. {key}='tag(log, interval(1e-7, 1e-4))'")
        if low is None or high is None or not low < high:
            raise SpaceError(f"{key}=interval({low}, {high}): the interval needs low < high\n"
                             f"  fix: e.g. {key}='interval(0.6, 1.2)'")
        if log and low <= 0:
            raise SpaceError(f"{key}: tag(log, interval({low}, {high})) needs a positive low end\n"
                             f"  fix: e.g. tag(log, interval(1e-7, 1e-4))")
        if isinstance(low, int) and isinstance(high, int):
            return IntDistribution(low, high, log=log)
        return FloatDistribution(float(low), float(high), log=log)
    raise SpaceError(f"{key}: this sweep cannot be sampled; use interval, tag(log, interval), choice or range")


def parse(arguments: Sequence[str], params: Mapping[str, Any] = ()) -> SearchSpace:
    """The space from ``hydra.sweeper.params`` (config file) and the command line's overrides."""
    parser = OverridesParser.create()
    lines: Dict[str, str] = {}
    for key, value in dict(params or {}).items():
        lines[str(key)] = f"{key}={value}"
    for text in arguments:
        o = parser.parse_override(text)
        lines[o.get_key_element() if o.package is None else text] = text
    space = SearchSpace()
    problems: List[str] = []
    for text in lines.values():
        try:
            o = parser.parse_override(text)
        except Exception as exc:  # Hydra's grammar error names the override
            problems.append(f"cannot read the override {text!r}: {exc}")
            continue
        if o.is_sweep_override():
            if o.is_hydra_override() or o.is_delete():
                problems.append(f"{text}: only config keys can be swept")
                continue
            leaf = o.key_or_group.rsplit(".", 1)[-1]
            if names_secret(leaf) or is_secret_name(leaf):
                # Optuna keeps every sampled value in its storage and prints it in the trials table.
                problems.append(f"{o.key_or_group}: names a secret, and a searched value is stored in the study's "
                                "storage and shown in its table in clear\n"
                                "  fix: drop it from the search; a secret is read from the environment clawgym is "
                                "launched from (docs/reference/secrets.md)")
                continue
            try:
                space.params[o.key_or_group] = _distribution(o)
            except SpaceError as err:
                problems.append(str(err))
                continue
            prefix = text[:len(text) - len(text.lstrip("+"))]
            if prefix:
                space.prefixes[o.key_or_group] = prefix
        else:
            space.fixed.append(text)
    if problems:
        raise SpaceError("\n".join(problems))
    return space
