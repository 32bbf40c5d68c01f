"""Launch logic of the clawgym launcher, imported only when a multirun starts.

Task configs of clawgym (``clawgym.config.is_clawgym_config``) go to
``clawgym.sweep.run_sweep``: every job composed and checked first, then packed onto one
Ray cluster. Any other app's jobs run here, in this process and in order, through
Hydra's ``run_job`` with the given task function (as Hydra's basic launcher does), so
resolvers and singletons of this process apply and each job gets a real JobReturn.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Sequence, Tuple

from hydra.core.utils import JobReturn, configure_log, filter_overrides, run_job, setup_globals
from omegaconf import open_dict

if TYPE_CHECKING:
    from hydra_plugins.clawgym_launcher.launcher import ClawGymLauncher

log = logging.getLogger(__name__)


class _ComposeOnce:
    """A config loader that hands each sweep job's composed config over once more.

    Hydra's sweeper composes every job of a batch (``validate_batch_is_legal``) and then
    calls the launcher, which would compose each again: the first config composed for a
    job's overrides is kept and returned to the next request for the same overrides
    (the launcher's), then forgotten. Everything else goes to the real loader.
    """

    def __init__(self, loader: Any) -> None:
        self._loader = loader
        self._kept: Dict[Tuple[str, ...], Any] = {}

    def load_sweep_config(self, master_config: Any, sweep_overrides: List[str]) -> Any:
        key = tuple(sweep_overrides)
        kept = self._kept.pop(key, None)
        if kept is not None and kept[0] is master_config:
            return kept[1]
        cfg = self._loader.load_sweep_config(master_config, list(sweep_overrides))
        self._kept[key] = (master_config, cfg)
        return cfg

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


def compose_once(hydra_context: Any, config: Any) -> None:
    """Install :class:`_ComposeOnce` for clawgym sweeps (other apps keep Hydra's loader)."""
    from clawgym.config import is_clawgym_config

    if hydra_context is not None and is_clawgym_config(config) and \
            not isinstance(hydra_context.config_loader, _ComposeOnce):
        hydra_context.config_loader = _ComposeOnce(hydra_context.config_loader)


def launch(launcher: "ClawGymLauncher", job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> List[JobReturn]:
    setup_globals()
    assert launcher.config is not None and launcher.hydra_context is not None and launcher.task_function is not None
    config = launcher.config
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    Path(str(config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)

    from clawgym.config import is_clawgym_config

    if is_clawgym_config(config):
        from clawgym.sweep import LauncherOptions, run_sweep

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
