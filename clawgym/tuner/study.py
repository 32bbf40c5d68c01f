"""The tuner's settings, and the Optuna study they open (sampler, pruner, storage).

Only Optuna's own samplers and pruners: nothing here samples or prunes by itself.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

import optuna

from clawgym.tuner.space import SearchSpace
from hydra_plugins.clawgym_sweeper.config import ClawGymSweeperConf

SAMPLERS = ("tpe", "random", "grid", "cmaes")
PRUNERS = ("none", "median", "successive_halving", "hyperband")
ON_ORPHAN = ("follow", "fail")


class SettingsError(ValueError):
    """A ``hydra.sweeper.*`` value that cannot work; ``str()`` names the key, the value and a fix."""


#: The sweeper's defaults are its Hydra config node's (one source of truth: the plugin's config.py).
_CONF = ClawGymSweeperConf()


@dataclass
class Settings:
    """``hydra.sweeper`` (hydra_plugins/clawgym_sweeper/config.py says what each means)."""

    sampler: str = _CONF.sampler
    seed: Optional[int] = _CONF.seed
    direction: str = _CONF.direction
    n_trials: int = _CONF.n_trials
    max_concurrent: int = _CONF.max_concurrent
    metric: str = _CONF.metric
    min_steps: int = _CONF.min_steps
    pruner: str = _CONF.pruner
    startup_trials: int = _CONF.startup_trials
    storage: Optional[str] = _CONF.storage
    # The node's default is ``${exp_name}``, resolved by Hydra; a mapping without it gets a plain name.
    study_name: str = "study"
    on_orphan: str = _CONF.on_orphan
    params: Dict[str, Any] = field(default_factory=dict)
    poll_interval: float = _CONF.poll_interval
    progress_interval: float = _CONF.progress_interval

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> "Settings":
        known = {f.name for f in fields(cls)}
        s = cls(**{k: v for k, v in dict(values).items() if k in known})
        s.params = {str(k): v for k, v in dict(s.params or {}).items()}
        problems: List[str] = []

        def bad(key: str, value: Any, rule: str, fix: str) -> None:
            problems.append(f"  hydra.sweeper.{key}={value!r}: {rule}\n    fix: {fix}")

        s.sampler, s.pruner, s.direction = str(s.sampler).lower(), str(s.pruner).lower(), str(s.direction).lower()
        s.pruner = {"sha": "successive_halving", "successivehalving": "successive_halving", "null": "none",
                    "None": "none"}.get(s.pruner, s.pruner)
        if s.sampler not in SAMPLERS:
            bad("sampler", s.sampler, "unknown sampler", f"one of {', '.join(SAMPLERS)}")
        if s.pruner not in PRUNERS:
            bad("pruner", s.pruner, "unknown pruner", f"one of {', '.join(PRUNERS)}")
        if s.direction not in ("maximize", "minimize"):
            bad("direction", s.direction, "a study maximizes or minimizes its metric", "maximize or minimize")
        if s.on_orphan not in ON_ORPHAN:
            bad("on_orphan", s.on_orphan, "what to do with a trial a killed launcher left", "follow or fail")
        for key, low in (("n_trials", 1), ("max_concurrent", 0), ("min_steps", 0), ("startup_trials", 0)):
            if not isinstance(getattr(s, key), int) or getattr(s, key) < low:
                bad(key, getattr(s, key), f"a whole number >= {low}", f"e.g. hydra.sweeper.{key}={max(low, 1)}")
        if not s.study_name or "/" in str(s.study_name):
            bad("study_name", s.study_name, "names the study and its journal file", "a name without '/'")
        if problems:
            raise SettingsError("\n".join(problems))
        return s


def storage_for(settings: Settings, sweep_dir: Path) -> Any:
    """An RDB URL as it is (Optuna opens it); otherwise a journal file (default: in the sweep dir)."""
    text = settings.storage
    if text and "://" in str(text):
        return str(text)
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    path = Path(str(text)).expanduser() if text else sweep_dir / f"{settings.study_name}.journal"
    path.parent.mkdir(parents=True, exist_ok=True)
    # Owner-only: the journal holds every trial's params and clawgym's records of its job.
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
    if path.stat().st_mode & 0o077 and path.stat().st_uid == os.getuid():
        path.chmod(0o600)
    return JournalStorage(JournalFileBackend(str(path)))


def storage_text(settings: Settings, sweep_dir: Path) -> str:
    """Where the study lives, for messages and records (an RDB URL without its password)."""
    text = settings.storage
    if text and "://" in str(text):
        from clawgym.common.secrets import redact

        import re

        return redact(re.sub(r"://([^:/@]+):[^@]*@", r"://\1:***@", str(text)))
    return str(Path(str(text)).expanduser() if text else sweep_dir / f"{settings.study_name}.journal")


def sampler_for(settings: Settings, space: SearchSpace) -> optuna.samplers.BaseSampler:
    if settings.sampler == "random":
        return optuna.samplers.RandomSampler(seed=settings.seed)
    if settings.sampler == "grid":
        return optuna.samplers.GridSampler(space.grid(), seed=settings.seed)
    if settings.sampler == "cmaes":
        return optuna.samplers.CmaEsSampler(seed=settings.seed)
    # constant_liar: trials still running count as bad guesses, so concurrent asks spread out.
    return optuna.samplers.TPESampler(seed=settings.seed, constant_liar=True)


def pruner_for(settings: Settings) -> optuna.pruners.BasePruner:
    warmup = max(int(settings.min_steps), 0)
    if settings.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=settings.startup_trials, n_warmup_steps=warmup)
    if settings.pruner == "successive_halving":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=max(warmup, 1))
    if settings.pruner == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=max(warmup, 1))
    return optuna.pruners.NopPruner()


def open_study(settings: Settings, space: SearchSpace, sweep_dir: Path) -> optuna.Study:
    """Create the study, or load it when the storage already holds one of this name (resume)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(storage=storage_for(settings, sweep_dir), study_name=str(settings.study_name),
                                direction=settings.direction, sampler=sampler_for(settings, space),
                                pruner=pruner_for(settings), load_if_exists=True)
    done = len(study.get_trials(deepcopy=False))
    if done and settings.seed is not None:
        # A resumed study: a sampler seeded as the first launch's would draw that launch's first
        # values again; seeded by the trials so far it goes on deterministically instead.
        study.sampler = sampler_for(replace(settings, seed=int(settings.seed) + done), space)
    return study


def in_memory_study(settings: Settings, space: SearchSpace) -> optuna.Study:
    """A study that lives in memory only (a dry run asks it for the trial it shows)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(direction=settings.direction, sampler=sampler_for(settings, space),
                               pruner=pruner_for(settings))
