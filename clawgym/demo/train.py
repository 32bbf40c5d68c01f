"""``train.py``'s Hydra app, importable from an installed clawgym (which ships no ``train.py``).

``clawgym demo`` runs its sweep with ``python -m clawgym.demo.train -m ...``: the same config tree
(``clawgym/conf``, the checkout's ``conf/``), the same callback, launcher plugin and task function
as ``python train.py -m ...``, so the demo walks the normal pipeline.
"""

import hydra
from omegaconf import DictConfig

import clawgym.config.compose  # noqa: F401  (registers the schemas and resolvers)
import clawgym.config.hydra_mode
from clawgym.app import run

clawgym.config.hydra_mode.install()


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> object:
    return run(cfg)


if __name__ == "__main__":
    main()
