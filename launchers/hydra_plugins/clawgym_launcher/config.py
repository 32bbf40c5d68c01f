"""Config node of the clawgym launcher, registered as ``hydra/launcher=clawgym``.

Hydra's plugin scan imports this module (its name does not start with ``_``), so the
registration below runs at discovery time. Keep it import-light.
"""

from dataclasses import dataclass

from hydra.core.config_store import ConfigStore


@dataclass
class ClawGymLauncherConf:
    _target_: str = "hydra_plugins.clawgym_launcher.launcher.ClawGymLauncher"
    # Run clawgym jobs one after another through the single-run path (a cluster per
    # job, no packing). Other apps' jobs always run in this process, in order.
    inline: bool = False
    # Most sweep jobs running at once; 0 = as many as the cluster's GPUs hold.
    max_concurrent: int = 0
    # Seconds between checks of running jobs.
    poll_interval: float = 1.0
    # Seconds between progress lines while nothing changes; 0 prints on changes only.
    progress_interval: float = 30.0


ConfigStore.instance().store(group="hydra/launcher", name="clawgym", node=ClawGymLauncherConf, provider="clawgym")
