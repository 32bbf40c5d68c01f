"""clawgym: Hydra-composed configuration and Ray launch layer for ClawGym-RL.

Importing the package is light on purpose: no ray, torch, docker or wandb. Those are
imported inside the functions that need them.
"""

__version__ = "0.1.0"
