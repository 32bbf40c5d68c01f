"""The clawgym Hydra sweeper: thin; the study is run by :mod:`clawgym.tuner` (imported on sweep)."""

from __future__ import annotations

from typing import Any, List, Optional

from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class ClawGymSweeper(Sweeper):
    def __init__(self, **params: Any) -> None:
        # The fields of ClawGymSweeperConf (without _target_).
        self.params = params
        self.config: Optional[DictConfig] = None
        self.hydra_context: Optional[HydraContext] = None
        self.task_function: Optional[TaskFunction] = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function

    def sweep(self, arguments: List[str]) -> Any:
        from clawgym.tuner import run_study

        assert self.config is not None and self.hydra_context is not None and self.task_function is not None
        return run_study(hydra_context=self.hydra_context, task_function=self.task_function, config=self.config,
                         arguments=list(arguments), settings=dict(self.params))
