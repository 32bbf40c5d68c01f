"""``clawgym import``: turn a slime launch script into an experiment config, with proof of parity.

``capture`` runs the script with recording stand-ins, ``parity`` compares two launches by
the trainer parser's semantics, ``core`` picks options, solves for the overrides, writes
``DIR/experiment/NAME.yaml`` and verifies it. Nothing here is imported by ``import clawgym``.
"""
