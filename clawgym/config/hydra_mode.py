"""One compose per ``python train.py`` instead of two.

Before it runs an app, Hydra 1.3 composes the whole config once just to read ``hydra.mode``
(``Hydra.get_mode``), then composes it again for the run. With clawgym's typed schema a
compose is most of a dry run's cost. clawgym's own config tree never sets ``hydra.mode``
(``tests/test_hydra_mode.py`` checks every YAML file of ``conf/``), so the answer is known
without composing: the value of a ``hydra.mode=`` override, else None (Hydra then takes the
mode from ``-m``/``--multirun``, as it does for a tree that does not set it).

Anything the fast answer cannot vouch for goes to Hydra's own ``get_mode``: an override that
selects a config file clawgym does not ship or one that names ``hydra`` or a global package, an extra search
path, or another app's config. Installed by ``train.py`` only, for its own process.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, List, Optional

_MODE_OVERRIDE = re.compile(r"^~?\+{0,2}hydra\.mode=(.*)$")
#: A group selection: ``group=option``, ``+group=option``, ``++group=option`` or ``group@pkg=option``.
_GROUP_OVERRIDE = re.compile(r"^[+~]{0,2}([A-Za-z0-9_/]+)(?:@[^=]*)?=(.*)$")


def _config_may_set_mode(conf: Path, group: str, option: str) -> bool:
    """False only when ``conf/<group>/<option>.yaml`` exists and cannot reach ``hydra.mode``:
    it names no ``hydra`` key and no global package (a group option lands under its group)."""
    path = conf / group / f"{option}.yaml"
    try:
        text = path.read_text()
    except OSError:
        return True  # not ours (another search path, a typo Hydra will report): ask Hydra
    return "hydra" in text or "_global_" in text


def known_mode(overrides: List[str], conf: Path) -> tuple:
    """(True, mode) when the mode follows from the overrides alone, else (False, None)."""
    from hydra.types import RunMode

    mode: Optional[Any] = None
    for o in overrides:
        m = _MODE_OVERRIDE.match(o)
        if m:
            value = m.group(1).strip()
            if value not in ("RUN", "MULTIRUN"):
                return False, None  # let Hydra report it
            mode = RunMode[value]
            continue
        if o.startswith(("hydra.searchpath", "+hydra.searchpath", "++hydra.searchpath")):
            return False, None
        m = _GROUP_OVERRIDE.match(o)
        if m and (conf / m.group(1)).is_dir():
            for option in m.group(2).split(","):
                if _config_may_set_mode(conf, m.group(1), option.strip()):
                    return False, None
    return True, mode


def install(primary: str = "config") -> None:
    """Answer ``Hydra.get_mode`` for clawgym's primary config without composing it."""
    from hydra._internal.hydra import Hydra

    from clawgym.config.compose import config_dir

    original = Hydra.get_mode
    if getattr(original, "_clawgym", False):
        return
    conf = config_dir()

    def get_mode(self: Any, config_name: Optional[str], overrides: List[str]) -> Any:
        if config_name == primary:
            ok, mode = known_mode(list(overrides), conf)
            if ok:
                return mode
        return original(self, config_name=config_name, overrides=overrides)

    get_mode._clawgym = True  # type: ignore[attr-defined]
    Hydra.get_mode = get_mode  # type: ignore[method-assign]
    _install_readable_yaml_errors()
    _install_composition_exit()


def _install_composition_exit() -> None:
    """A composition error (a misspelled key, an unknown option, an override that does not parse)
    exits 2, refused before anything started (clawgym/common/exit_codes.py), not Hydra's 1, which a failed
    job also exits with; a key the schema does not define names the closest one instead of Hydra's
    hint to add it with ``+``."""
    import hydra._internal.utils as hydra_utils

    original = hydra_utils.run_and_report
    if getattr(original, "_clawgym", False):
        return

    def run_and_report(func: Any) -> Any:
        from hydra.errors import HydraException
        from omegaconf.errors import OmegaConfBaseException

        def guarded() -> Any:
            try:
                return func()
            except (HydraException, OmegaConfBaseException) as exc:
                import os
                import sys

                from clawgym.common.exit_codes import REFUSED
                from clawgym.config.keys import composition_report

                if os.environ.get("HYDRA_FULL_ERROR") == "1":
                    raise
                sys.stderr.write(composition_report(exc) + "\n")
                sys.exit(REFUSED)

        return original(guarded)

    run_and_report._clawgym = True  # type: ignore[attr-defined]
    hydra_utils.run_and_report = run_and_report


def _install_readable_yaml_errors() -> None:
    """A config file YAML cannot read (a NUL byte, a bad indent, not UTF-8) is a clear error naming
    the file, not a traceback: Hydra prints its own composition errors without one."""
    # Hydra's plugin scan executes its core config sources again as fresh modules, so the source
    # classes cannot be patched; the repository that calls them can.
    from hydra._internal.config_repository import ConfigRepository
    from hydra.errors import ConfigCompositionException

    original = ConfigRepository.load_config
    if getattr(original, "_clawgym", False):
        return

    def load_config(self: Any, config_path: str) -> Any:
        import yaml

        try:
            return original(self, config_path)
        except (yaml.YAMLError, UnicodeDecodeError, ValueError) as exc:
            where = f"{config_path}.yaml"
            mark = getattr(exc, "name", None) or ""
            where = mark if mark and mark != "<file>" else where
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ConfigCompositionException(
                f"clawgym: cannot read the config file {where}: {first}\n"
                f"  fix: edit {where} into plain YAML (no NUL or control characters, UTF-8)") from None

    load_config._clawgym = True  # type: ignore[attr-defined]
    ConfigRepository.load_config = load_config  # type: ignore[method-assign]
