"""The objective: a metric ``clawgym runs`` reads, and a reduction over its rollout steps.

``hydra.sweeper.metric=eval/aime:max`` -> the best ``eval/aime`` a trial logged;
``rollout/raw_reward:mean_last_5`` -> the mean of its last 5 values; ``:last``, ``:min``,
``:mean``, ``:max_last_N``, ``:min_last_N`` likewise. The name is a TensorBoard tag slime logs
(``rollout/*``, ``eval/*``, ``perf/*``, ``train/*``) or a ``clawgym runs`` column that stands
for one (``reward``, ``tok_s_gpu``, ``train_tok_s``, ``step_s``). Without a reduction: ``last``.

The pruner is fed the same reduction over the points up to each step (``intermediate``), so a
trial is judged during its run by what will be its objective. Pure (the tuner reads the events).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from clawgym.runs.table import RAW_REWARD, STEP_TIME, TOKENS_PER_GPU, TRAIN_TOKENS

#: ``clawgym runs`` columns that name one tag.
COLUMN_TAGS = {"reward": RAW_REWARD, "tok_s_gpu": TOKENS_PER_GPU, "train_tok_s": TRAIN_TOKENS, "step_s": STEP_TIME}
_REDUCTION = re.compile(r"^(last|max|min|mean)(?:_last_([1-9][0-9]*))?$")


class MetricError(ValueError):
    """A metric setting that cannot be read; ``str()`` says what works."""


@dataclass(frozen=True)
class Metric:
    tag: str
    how: str = "last"
    # Last N points only (None: all).
    window: Optional[int] = None

    @property
    def text(self) -> str:
        return f"{self.tag}:{self.how}" + (f"_last_{self.window}" if self.window else "")

    def reduce(self, values: Sequence[float]) -> Optional[float]:
        if not values:
            return None
        tail = list(values[-self.window:]) if self.window else list(values)
        if self.how == "last":
            return tail[-1]
        if self.how == "max":
            return max(tail)
        if self.how == "min":
            return min(tail)
        return sum(tail) / len(tail)

    def intermediate(self, points: Sequence[Tuple[int, float]]) -> List[Tuple[int, float]]:
        """(step, the reduction over the points up to that step) at every step logged."""
        out = []
        for i, (step, _) in enumerate(points):
            value = self.reduce([v for _, v in points[:i + 1]])
            if value is not None:
                out.append((step, value))
        return out


def parse_metric(text: str) -> Metric:
    tag, sep, how = str(text).strip().rpartition(":")
    if not sep:
        tag, how = how, "last"
    if not tag:
        raise MetricError(f"hydra.sweeper.metric={text!r}: no metric named\n"
                          "  fix: e.g. hydra.sweeper.metric=eval/aime:max or rollout/raw_reward:mean_last_5")
    m = _REDUCTION.match(how)
    if m is None:
        raise MetricError(f"hydra.sweeper.metric={text!r}: unknown reduction {how!r}\n"
                          "  fix: one of last, max, min, mean, mean_last_N (e.g. mean_last_5), max_last_N, min_last_N")
    if m.group(2) and m.group(1) == "last":
        raise MetricError(f"hydra.sweeper.metric={text!r}: last_last_N means nothing\n  fix: last or mean_last_N")
    return Metric(tag=COLUMN_TAGS.get(tag, tag), how=m.group(1), window=int(m.group(2)) if m.group(2) else None)
