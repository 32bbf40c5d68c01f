"""Preflight ``preemption``: a SLURM run whose save cadence would redo too much work after a preemption
or a time limit is warned (never refused), with the numbers and a save_interval under the bound."""

from __future__ import annotations

import pytest

from clawgym.config.compose import compose, to_plain
from clawgym.preflight import CHECKS, run_preflight
from clawgym.preflight.core import WARNED, CheckWarning, Context, NotApplicable
from clawgym.preflight.preemption import MAX_LOST_FRACTION, MAX_LOST_S, check_preemption, lost_work, slurm_seconds


def _c(*overrides: str) -> dict:
    return to_plain(compose(["paths.root=/tmp/cg-preempt", "cluster=slurm", *overrides]), resolve=True)


@pytest.mark.parametrize("text,seconds", [("90", 5400), ("30:15", 1815), ("4:00:00", 14400), ("2-00", 172800),
                                          ("1-02:03", 93780), ("1-02:03:04", 93784), (None, None),
                                          ("UNLIMITED", None)])
def test_slurm_time_formats_are_read_as_sbatch_documents_them(text, seconds):
    assert slurm_seconds(text) == seconds


def test_the_bound_is_ten_percent_of_the_time_limit_or_an_hour_of_the_allocation():
    w = lost_work(_c("slurm.time=4:00:00", "checkpoint.save_interval=5"), step_s=600.0, gpus=8)
    assert w["lost_s"] == 3000.0 and w["bound_s"] == MAX_LOST_FRACTION * 14400 and w["over"]
    assert w["suggested"] == 2  # 2 x 600 s = 1200 s <= 1440 s
    w = lost_work(_c("checkpoint.save_interval=5"), step_s=600.0, gpus=8)
    assert w["bound_s"] == MAX_LOST_S and not w["over"]
    w = lost_work(_c("checkpoint.save_interval=10"), step_s=600.0, gpus=8)
    assert w["over"] and w["suggested"] == 6 and w["lost_gpu_h"] == pytest.approx(6000 * 8 / 3600)


def test_a_slurm_run_that_would_redo_too_much_is_warned_with_a_save_interval_that_works():
    c = _c("slurm.time=4:00:00", "checkpoint.save_interval=20")
    with pytest.raises(CheckWarning) as exc:
        check_preemption(Context(c=c, plan=None, local_head=False))
    assert "checkpoint.save_interval=20 x" in exc.value.problem and "of 8 GPUs" in exc.value.problem
    assert "more than 10% of slurm.time=4:00:00" in exc.value.problem
    assert exc.value.fix.startswith("checkpoint.save_interval=")
    suggested = int(exc.value.fix.split("=")[1].split()[0])
    assert 1 <= suggested < 20
    # The suggestion itself passes.
    check_preemption(Context(c=_c("slurm.time=4:00:00", f"checkpoint.save_interval={suggested}"), plan=None,
                             local_head=False))


def test_the_check_is_only_about_slurm():
    with pytest.raises(NotApplicable):
        check_preemption(Context(c=to_plain(compose(["paths.root=/tmp/cg-preempt"]), resolve=True), plan=None,
                                 local_head=False))


def test_a_warning_is_a_line_of_the_checklist_and_does_not_refuse_the_launch():
    only = [ch.name for ch in CHECKS if ch.name not in ("preemption", "memory")]
    c = _c("slurm.time=4:00:00", "checkpoint.save_interval=20", f"skip_checks=[{','.join(only)}]",
           "memory.gpu=H100-80GB")
    lines = []
    report = run_preflight(c, None, local_head=False, echo=lines.append)  # raises on a failure
    result = report.by_name()["preemption"]
    assert result.status == WARNED and report.ok
    assert "! preemption" in "\n".join(lines) and "fix: checkpoint.save_interval=" in "\n".join(lines)
