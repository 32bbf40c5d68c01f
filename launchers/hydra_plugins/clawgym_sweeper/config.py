"""Config node of the clawgym sweeper, registered as ``hydra/sweeper=clawgym``.

Hydra's plugin scan imports this module, so the registration runs at discovery time; keep it
import-light (no Optuna here). The node is stored at package ``hydra``: choosing the sweeper also
gives the study a sweep dir of its own that does not change between launches
(``multirun/tune/<study_name>``), so the same command again finds the study's storage there and
continues it. ``hydra.sweep.dir=...`` on the command line still wins.
"""

from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from hydra.core.config_store import ConfigStore


@dataclass
class ClawGymSweeperConf:
    _target_: str = "hydra_plugins.clawgym_sweeper.sweeper.ClawGymSweeper"
    # Optuna sampler: tpe, random, grid, cmaes.
    sampler: str = "tpe"
    # Sampler seed (null: random).
    seed: Optional[int] = None
    # maximize or minimize the metric.
    direction: str = "maximize"
    # Trials the study holds when this launch is done (earlier launches' trials count).
    n_trials: int = 20
    # Most trials running at once; 0 = as many as the cluster's GPUs hold.
    max_concurrent: int = 0
    # The objective: a TensorBoard tag (or a `clawgym runs` column: reward, tok_s_gpu, train_tok_s,
    # step_s) and a reduction over its steps: last, max, min, mean, mean_last_N.
    metric: str = "rollout/raw_reward:mean_last_5"
    # Rollout steps a trial runs before a pruner may stop it.
    min_steps: int = 1
    # none, median, successive_halving, hyperband.
    pruner: str = "none"
    # Trials that finish before the median pruner prunes anything.
    startup_trials: int = 2
    # Optuna storage: null = a journal file in the sweep dir (<sweep dir>/<study_name>.journal),
    # a path = a journal file there, an RDB URL (sqlite:///..., postgresql://...) shares the study.
    storage: Optional[str] = None
    study_name: str = "${exp_name}"
    # A trial an earlier (killed) launcher left running: follow it, or fail it (its job is stopped).
    on_orphan: str = "follow"
    # Search space from a config file: key -> override value, e.g. optimizer.lr: tag(log, interval(1e-7, 1e-4)).
    params: Dict[str, Any] = field(default_factory=dict)
    # Seconds between checks of running trials (their events and their jobs).
    poll_interval: float = 1.0
    # Seconds between progress lines while nothing changes; 0 = on changes only.
    progress_interval: float = 30.0


# A plain mapping at package ``hydra`` (a dataclass here would type the whole ``hydra`` node).
ConfigStore.instance().store(group="hydra/sweeper", name="clawgym", package="hydra", provider="clawgym",
                             node={"sweeper": ClawGymSweeperConf,
                                   "sweep": {"dir": "multirun/tune/${hydra.sweeper.study_name}"}})
