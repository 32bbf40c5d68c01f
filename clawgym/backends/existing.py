"""A running Ray cluster at ``ray.address``: connected to, never started or stopped."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Sequence

from clawgym.backends import BackendError
from clawgym.backends._ray import RayJobsBackend


class ExistingCluster(RayJobsBackend):
    name = "existing"

    def __init__(self, plans: Sequence[Any], cfgs: Sequence[Any]) -> None:
        super().__init__(plans, cfgs)
        self.address = plans[0].address

    def checks_this_machine(self) -> bool:
        return False

    def answers(self) -> bool:
        from clawgym.launch import rayjob

        return rayjob.dashboard_responds(self.address, timeout=5.0)

    def start(self, secrets: Mapping[str, str], *, on_address: Optional[Callable[[str], None]] = None,
              while_waiting: Optional[Callable[[], None]] = None) -> Optional[str]:
        from clawgym.launch import rayjob as launch

        try:
            launch.jobs_client(self.address)  # reachable, or a clear error
        except launch.LaunchError as err:
            raise BackendError(str(err)) from None
        if while_waiting is not None:
            while_waiting()
        if on_address is not None:
            on_address(self.address)
        return self.address

    def close(self, *, keep: bool, reason: str = "", ignore_jobs: Sequence[str] = ()) -> None:
        """Nothing to clean up: the cluster is someone else's."""
