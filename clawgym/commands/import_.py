"""``clawgym import SCRIPT``: a slime launch script -> ``DIR/experiment/NAME.yaml``, with proof of parity.

The script runs under bash in a sandbox (bubblewrap: its own user, PID, network and
UTS namespaces, read-only views of the machine and its checkout) with recording
stand-ins (nothing is killed, started or submitted); what it would submit is turned
into an experiment config that picks the closest model / gpu_layout / trainer /
sandbox options and sets every remaining flag and variable. The experiment is then
composed, planned and compared with the script dest by dest (argparse semantics) and
variable by variable. Setup steps the script runs (installs, downloads, conversions)
are listed as prerequisites (--strict refuses them); probes are answered as a slime
node would, and every answer is listed. The experiment is written only when it
launches the same run. Exit status: 0 when it does, 1 when anything differs or cannot
be expressed (a table says what; nothing is written), 2 when nothing could be imported.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Dict, List
from clawgym.common.exit_codes import REFUSED


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "import", help="turn a slime launch script into an experiment config and prove it is the same run",
        description=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("script", type=Path, help="the launch script (bash), e.g. scripts/run-qwen3-4B.sh")
    parser.add_argument("--name", help="experiment name (default: the script's file name), "
                                       "used as python train.py +experiment=NAME")
    parser.add_argument("--trainer", choices=["slime", "clawgym"],
                        help="trainer flavour (default: the one whose parser knows every flag of the script)")
    parser.add_argument("--out", type=Path, default=Path("conf"),
                        help="config dir to write experiment/NAME.yaml into (default: conf/)")
    parser.add_argument("--slime-root", type=Path,
                        help="slime checkout whose scripts/models/ the script sources "
                             "(default: the script's own repository)")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="environment variable the script reads (repeatable); by default the script "
                             "runs with none, so its own defaults apply")
    parser.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                        help="seconds the script may run in the importer's sandbox before it is killed with "
                             "everything it started (default: 120)")
    parser.add_argument("--force", action="store_true", help="replace an existing experiment file")
    parser.add_argument("--check", action="store_true",
                        help="write nothing: compare the script with the existing experiment NAME "
                             "(e.g. after editing it by hand) and print the difference table; with --force, "
                             "re-import and replace it when it differs")
    parser.add_argument("--strict", action="store_true",
                        help="refuse a script that runs setup steps (installs, downloads, conversions) instead "
                             "of listing them as prerequisites")
    parser.add_argument("--gpus-per-node", type=int, default=8, metavar="N",
                        help="GPUs the nvidia-smi stand-in reports (default: 8)")
    parser.add_argument("--no-nvlink", dest="nvlink", action="store_false",
                        help="the nvidia-smi stand-in reports no NVLink between the GPUs")
    parser.set_defaults(func=run)
    return parser


def parse_env(items: List[str]) -> Dict[str, str]:
    env: Dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValueError(f"--env {item!r}: expected NAME=VALUE")
        env[name] = value
    return env


def run(args: argparse.Namespace) -> int:
    from clawgym.common import secrets
    from clawgym.importer.capture import DEFAULT_TIMEOUT
    from clawgym.importer.entry import ImportFailure, format_result, import_script
    from clawgym.registry import RegistryError

    try:
        env = parse_env(args.env)
        # Values of secret-named --env variables are masked in everything printed, refusals included.
        secrets.remember(secrets.named_secrets(env).values())
        timeout = DEFAULT_TIMEOUT if args.timeout is None else args.timeout
        result = import_script(args.script, name=args.name, trainer=args.trainer, out_dir=args.out,
                               slime_root=args.slime_root, env=env, force=args.force,
                               check=args.check, timeout=timeout, strict=args.strict,
                               gpus_per_node=args.gpus_per_node, nvlink=args.nvlink)
    except (ImportFailure, RegistryError, ValueError) as exc:
        print(f"clawgym import: {secrets.redact(str(exc))}", file=sys.stderr)
        return REFUSED
    print(format_result(result))
    return 0 if result.ok else 1
