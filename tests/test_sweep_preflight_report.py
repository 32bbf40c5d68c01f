"""A sweep refused by preflight (issue 35): a finding the jobs share is printed once, naming the jobs
it concerns; what fails for one job alone is printed under that job."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from clawgym.preflight.core import FAILED, OK, CheckResult, PreflightError, Report


def _error(*failures, passed=("config", "gpus", "ports", "disk", "tasks", "image", "slime")):
    results = [CheckResult(n, f"{n} check", OK, "fine") for n in passed]
    results += [CheckResult(n, f"{n} check", FAILED, detail, fix) for n, detail, fix in failures]
    return PreflightError(Report(results=results, heading="preflight"))


CHECKOUT = ("checkout", "paths.root=/nowhere has no slime/", "set paths.root to your RL checkout")


def _sweep(errors):
    """What Pipeline._preflight raises for a sweep whose jobs' preflights raise ``errors`` (None: passes)."""
    from clawgym.pipeline import checks
    from clawgym.pipeline.jobs import Refused

    jobs = [SimpleNamespace(num=i, label=f"rollout.temperature=0.{i}", cfg=None, plan=None) for i in range(len(errors))]
    stub = SimpleNamespace(_sweep=True, jobs=jobs, backend=SimpleNamespace(checks_this_machine=lambda: True))
    by_job = iter(errors)

    def fake_preflight(cfg, plan, **kw):
        err = next(by_job)
        if err is not None:
            raise err

    import clawgym.preflight as preflight

    original = preflight.run_preflight
    preflight.run_preflight = fake_preflight
    try:
        with pytest.raises(Refused) as info:
            checks.LaunchChecks._preflight(stub)
    finally:
        preflight.run_preflight = original
    return str(info.value)


def test_a_sweep_refusal_prints_a_shared_preflight_finding_once_naming_its_jobs():
    disk = ("disk", "job 2's save dir has 1 GiB free", "free 40 GiB under /ckpt/job2")
    text = _sweep([_error(CHECKOUT), _error(CHECKOUT), _error(CHECKOUT, disk), None])
    assert "preflight failed for 3 of 4 jobs" in text
    # The shared finding once, with the jobs it concerns.
    assert text.count("paths.root=/nowhere has no slime/") == 1
    assert "shared by 3 jobs: #0 (rollout.temperature=0.0), #1 (rollout.temperature=0.1), #2" in text
    # The per-job finding under its job only.
    assert text.count("save dir has 1 GiB free") == 1
    own = text.split("sweep job #2 (rollout.temperature=0.2):")[1]
    assert "1 GiB free" in own and "no slime" not in own
    assert "sweep job #0" not in text and "sweep job #1" not in text and "#3" not in text
    # The passed checks are named once, not as a checklist per job; the closing line names every failure.
    assert text.count("✓") == 0 and "passed for every job above: config, gpus, ports" in text
    assert "preflight failed at 'checkout', 'disk' (2 checks)" in text


def test_a_finding_of_every_job_says_all_jobs():
    text = _sweep([_error(CHECKOUT), _error(CHECKOUT)])
    assert "shared by all 2 jobs:" in text and text.count("no slime") == 1 and "sweep job #" not in text
