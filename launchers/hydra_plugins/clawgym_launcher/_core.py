"""Launch logic of the clawgym launcher, imported only when a multirun starts.

Task configs of clawgym (``clawgym.config.compose.is_clawgym_config``) go to
``clawgym.sweep.core.run_sweep``: every job composed and checked first, then packed onto one
Ray cluster. Any other app's jobs run here, in this process and in order, through
Hydra's ``run_job`` with the given task function (as Hydra's basic launcher does), so
resolvers and singletons of this process apply and each job gets a real JobReturn.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

from hydra.core.utils import JobReturn, configure_log, filter_overrides, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from omegaconf import open_dict

log = logging.getLogger(__name__)


class _ComposeOnce:
    """A config loader that composes each sweep job once, sharing what jobs share.

    Hydra's sweeper composes every job of a batch (``validate_batch_is_legal``) and then
    calls the launcher, which would compose each again. Here a job is composed the way
    ``clawgym.sweep.core.compose_jobs`` composes (one tree per distinct set of group choices,
    value overrides applied to a copy; the same result as Hydra's), the config is kept,
    and handed to the launcher's request for the same overrides (``take_composed``), then
    forgotten. Everything else goes to the real loader.
    """

    def __init__(self, loader: Any) -> None:
        self._loader = loader
        self._kept: Dict[Tuple[str, ...], Any] = {}
        # Composed trees per group-choice set, for one master config at a time.
        self._templates: Dict[Tuple[str, ...], Any] = {}
        self._templates_of: Any = None

    def _compose(self, master_config: Any, sweep_overrides: List[str]) -> Any:
        from clawgym.sweep.core import compose_jobs

        if self._templates_of is not master_config:
            self._templates, self._templates_of = {}, master_config
        return compose_jobs(self._loader, master_config, [list(sweep_overrides)], templates=self._templates)[0]

    def load_sweep_config(self, master_config: Any, sweep_overrides: List[str]) -> Any:
        """Hydra's sweeper validating the batch: compose the job and keep it for the launcher."""
        key = tuple(sweep_overrides)
        kept = self._kept.pop(key, None)
        if kept is not None and kept[0] is master_config:
            return kept[1]
        cfg = self._compose(master_config, list(sweep_overrides))
        self._kept[key] = (master_config, cfg)
        return cfg

    def take_composed(self, master_config: Any, sweep_overrides: List[str]) -> Any:
        """The launcher: the job's kept config (composed now when the sweeper did not validate it)."""
        kept = self._kept.pop(tuple(sweep_overrides), None)
        if kept is not None and kept[0] is master_config:
            return kept[1]
        return self._compose(master_config, list(sweep_overrides))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


def compose_once(hydra_context: Any, config: Any) -> None:
    """Install :class:`_ComposeOnce` for clawgym sweeps (other apps keep Hydra's loader)."""
    from clawgym.config.compose import is_clawgym_config

    if hydra_context is not None and is_clawgym_config(config) and \
            not isinstance(hydra_context.config_loader, _ComposeOnce):
        hydra_context.config_loader = _ComposeOnce(hydra_context.config_loader)


# The launcher is typed by Hydra's base class: naming ClawGymLauncher here would close a circle
# (launcher.py imports this module when a multirun starts).
def launch(launcher: Launcher, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> List[JobReturn]:
    setup_globals()
    assert launcher.config is not None and launcher.hydra_context is not None and launcher.task_function is not None
    config = launcher.config
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    Path(str(config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)

    from clawgym.config.compose import is_clawgym_config

    if is_clawgym_config(config):
        from clawgym.sweep.core import LauncherOptions, run_sweep

        fields = LauncherOptions.__dataclass_fields__
        options = LauncherOptions(**{k: v for k, v in launcher.params.items() if k in fields})
        return run_sweep(hydra_context=launcher.hydra_context, task_function=launcher.task_function, config=config,
                         job_overrides=job_overrides, initial_job_idx=initial_job_idx, options=options)

    log.info(f"Launching {len(job_overrides)} jobs in this process")
    runs: List[JobReturn] = []
    for idx, overrides in enumerate(job_overrides):
        idx = initial_job_idx + idx
        log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
        sweep_config = launcher.hydra_context.config_loader.load_sweep_config(config, list(overrides))
        with open_dict(sweep_config):
            sweep_config.hydra.job.id = idx
            sweep_config.hydra.job.num = idx
        runs.append(run_job(hydra_context=launcher.hydra_context, task_function=launcher.task_function,
                            config=sweep_config, job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir"))
        configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    return runs
