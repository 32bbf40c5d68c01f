"""``clawgym demo``'s stand-in ClawGym-RL checkout (see :mod:`clawgym.demo.checkout`)."""
