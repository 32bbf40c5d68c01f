"""``clawgym import``: turn a slime launch script into an experiment config, with proof of parity.

``capture`` runs the script with recording stand-ins (``sandbox``, ``recorder``), ``parity``
compares two launches by the trainer parser's semantics and ``compare`` lines up the script's
launch with the plan's; ``owners`` finds the key that owns a flag or variable, ``options`` reads
the config tree and picks group options, ``solver`` solves for the overrides, ``writing`` writes
``DIR/experiment/NAME.yaml`` and ``entry`` (``import_script``) drives it all and verifies the file;
``result`` holds what it found. Nothing here is imported by ``import clawgym``.
"""
