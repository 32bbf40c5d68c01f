"""Values any key may hold: numbers that are finite and of a size a run can have.

Positivity rules compare with ``<= 0``, which NaN passes; an int of 400 digits overflows
``math.isclose`` in the flag checks. Both are refused here, once, before any rule reasons
about them. Not a mirror of a trainer check (the trainer would take ``nan`` as a learning rate).
"""

from __future__ import annotations

import math

from clawgym.validate.core import Collector

#: Larger than any size, count, port or step a run can have (2**40 ~ 1.1e12).
ABSURD = 2 ** 40


def _numbers(data, prefix=""):
    """(dotted key, number) for every numeric leaf, list elements included."""
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _numbers(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from _numbers(v, f"{prefix}.{i}")
    elif isinstance(data, (int, float)) and not isinstance(data, bool):
        yield prefix, data


def rule_numbers_sane(v: Collector) -> None:
    """No NaN or infinity, no magnitude over 2**40, in any key (args.* and lists included)."""
    for key, value in _numbers({k: val for k, val in v.c.items() if k != "hydra"}):
        if isinstance(value, float) and not math.isfinite(value):
            v.add("numbers-finite", [key], f"{key} is {value}: NaN and infinity pass every comparison "
                  "(a positivity check included) and train nothing",
                  f"set {key} to a finite number")
        elif abs(value) > ABSURD:
            size = f"{len(str(abs(int(value))))}-digit number" if isinstance(value, int) else f"{value:g}"
            v.add("numbers-in-range", [key], f"{key} is a {size}, beyond any size, count or step a run "
                  f"can have (limit 2**40 = {ABSURD})", f"set {key} to a value of at most {ABSURD}")
