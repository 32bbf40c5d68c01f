"""Subcommands of the ``clawgym`` CLI (see clawgym/cli.py)."""
