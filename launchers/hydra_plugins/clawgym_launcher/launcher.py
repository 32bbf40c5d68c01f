"""The clawgym Hydra launcher: thin, so the plugin scan stays fast.

Everything heavy (composition of the sweep, Ray) is in ``_core`` and imported on launch.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class ClawGymLauncher(Launcher):
    def __init__(self, **params: Any) -> None:
        # The fields of ClawGymLauncherConf (without _target_).
        self.params = params
        self.config: Optional[DictConfig] = None
        self.task_function: Optional[TaskFunction] = None
        self.hydra_context: Optional[HydraContext] = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function
        from hydra_plugins.clawgym_launcher import _core

        # The sweeper composes every job to check it (validate_batch_is_legal) right before
        # launch(): keep those configs, so each clawgym job is composed once in all.
        _core.compose_once(hydra_context, config)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from hydra_plugins.clawgym_launcher import _core

        return _core.launch(self, job_overrides=job_overrides, initial_job_idx=initial_job_idx)
