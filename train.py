"""ClawGym-RL training entry point: compose, validate, plan, launch.

    python train.py model=qwen3_4b gpu_layout=split_4_4
    python train.py -m gpu_layout=split_4_4,colocate_8 rollout.train_num_workers=32,64
    python train.py --explain rollout.temperature model=qwen3_4b rollout.temperature=0.8
"""

import sys

if __name__ == "__main__" and any(a == "--explain" or a.startswith("--explain=") for a in sys.argv[1:]):
    # What a key means and where its value comes from, for the overrides of this run: answered
    # before Hydra launches anything (no output dir, no callback, no head).
    from clawgym.commands.explain import main as explain

    items = [a.split("=", 1)[1] if a.startswith("--explain=") else a for a in sys.argv[1:] if a != "--explain"]
    sys.exit(explain(items))

import hydra
from omegaconf import DictConfig

import clawgym.config.compose  # noqa: F401  (registers the schemas and resolvers)
import clawgym.config.hydra_mode
from clawgym.app import run

# Hydra would compose the whole config once more only to read hydra.mode, which clawgym's
# tree never sets (clawgym/config/hydra_mode.py).
clawgym.config.hydra_mode.install()


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> object:
    return run(cfg)


if __name__ == "__main__":
    main()
