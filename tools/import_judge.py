#!/usr/bin/env python3
"""Parse trainer argvs with a trainer's own ``parse_args`` (and its validation) on CPU.

Run by tools/measure_import.py with the interpreter of a trainer environment (tools/README.md):
for each request ``{"id", "argv", "env"}`` it sets ``sys.argv`` and calls slime's real
``slime.utils.arguments.parse_args()``, which parses the four parsers of upstream slime and
runs ``slime_validate_args``, Megatron's ``validate_args`` and ``sglang_validate_args``. The
answer is the parsed namespace (every dest, JSON-safe), or the refusal (argparse's message, or
the exception and where in the trainer's files it was raised).

Sources and stand-ins come from tools/trainer_env.py and the CUDA device answers from
tools/trainer_judge.py (``--tools DIR``: where those two live), so the two tools judge with the
same environment. Nothing here is imported by ``clawgym``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import sys
import tempfile
import traceback


def _safe(value):
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_safe(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _safe(v) for k, v in value.items()}
    return f"<{type(value).__name__}: {value!r}>"[:300]


def _rooted(argv, root, files):
    """Absolute paths of the argv moved under ``root`` (the machine has none of the scripts'
    checkpoints and data; slime checks that --ref-load exists): each becomes a directory there,
    or the file the request carries for it (a generated --sglang-config). Both argvs of a script
    are moved alike, and the namespace is mapped back, so the comparison is unaffected."""
    out = []
    for tok in argv:
        flag, eq, value = tok.partition("=") if tok.startswith("--") else ("", "", tok)
        if tok.startswith("--") and not eq:
            out.append(tok)
            continue
        if value.startswith("/") and not value.startswith("//"):
            moved = root + value
            if value in files:
                os.makedirs(os.path.dirname(moved), exist_ok=True)
                with open(moved, "w") as f:
                    f.write(files[value])
            else:
                os.makedirs(moved, exist_ok=True)
            value = moved
        out.append(f"{flag}={value}" if eq else value)
    return out


def _unrooted(value, root):
    if isinstance(value, str):
        return value.replace(root, "")
    if isinstance(value, list):
        return [_unrooted(v, root) for v in value]
    if isinstance(value, dict):
        return {k: _unrooted(v, root) for k, v in value.items()}
    return value


def _message(log: str, exc: BaseException) -> str:
    lines = [ln for ln in log.strip().splitlines() if "error:" in ln]
    return lines[-1].split("error:", 1)[1].strip() if lines else f"exit {getattr(exc, 'code', exc)}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tools", required=True, help="directory holding trainer_env.py and trainer_judge.py")
    ap.add_argument("--flavour", default="slime")
    ap.add_argument("--slime", required=True)
    ap.add_argument("--megatron", required=True)
    ap.add_argument("--sglang")
    ap.add_argument("--router")
    ap.add_argument("--sglang-patch", action="append", default=[])
    ap.add_argument("--megatron-patch", action="append", default=[])
    ap.add_argument("--stand-in", action="append", default=[])
    ap.add_argument("--requests", required=True)
    ap.add_argument("--out", required=True)
    ns = ap.parse_args(argv)
    sys.path.insert(0, os.path.realpath(ns.tools))
    from trainer_env import prepare_sources
    import trainer_judge

    workdir = tempfile.mkdtemp(prefix="clawgym-import-judge-")
    stand_ins = trainer_judge._StandIns()
    log = io.StringIO()
    with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        prepare_sources(ns, workdir, tool="import_judge")
        import torch  # noqa: F401

        trainer_judge._install_device_stand_ins(ns.flavour, stand_ins)
        import slime.utils.arguments as slime_arguments
        import slime.backends.megatron_utils.arguments as megatron_arguments
    current = {"architectures": []}

    class _CheckpointConfig:
        """``AutoConfig`` of the checkpoint dirs the argvs name, which are not on this machine:
        only the architecture names slime reads (``_is_allgather_cp_dsa_model``), per request."""

        @staticmethod
        def from_pretrained(path, **kw):  # noqa: ARG004
            import types

            return types.SimpleNamespace(architectures=list(current["architectures"]), name_or_path=path)

    megatron_arguments.AutoConfig = _CheckpointConfig
    megatron_arguments._hf_validate_args = lambda args, hf_config: None
    stand_ins.add("slime megatron_utils.arguments AutoConfig.from_pretrained and _hf_validate_args",
                  "the checkpoints the scripts name are not here: the config.json comparison (a check of the "
                  "checkpoint, not of the argv) is skipped; the architecture names come from the request")
    logging.disable(logging.WARNING)
    with open(ns.requests) as f:
        requests = [json.loads(line) for line in f if line.strip()]
    with open(ns.out + ".tmp", "w") as out:
        out.write(json.dumps({"meta": {"flavour": ns.flavour, "stand_ins": stand_ins.items,
                                       "stand_in_imports": list(ns.stand_in)}}) + "\n")
        for req in requests:
            saved_env, saved_argv = dict(os.environ), sys.argv
            os.environ.update({k: str(v) for k, v in (req.get("env") or {}).items() if k != "PYTHONPATH"})
            root = tempfile.mkdtemp(prefix="clawgym-import-judge-root-")
            sys.argv = [req.get("script", "train.py"), *_rooted(req["argv"], root, req.get("files") or {})]
            current["architectures"] = list(req.get("architectures") or [])
            buf = io.StringIO()
            answer = {"id": req["id"]}
            try:
                with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
                    args = slime_arguments.parse_args()
                answer.update(accepted=True, namespace={k: _unrooted(_safe(v), root)
                                                        for k, v in sorted(vars(args).items())})
            except SystemExit as exc:
                answer.update(accepted=False, reason=f"parse: {_message(buf.getvalue(), exc)}")
            except Exception as exc:  # noqa: BLE001 - the trainer's refusal, whatever it raised
                tb = traceback.extract_tb(exc.__traceback__)
                where = next((f"{os.path.basename(fr.filename)}:{fr.lineno} {fr.name}" for fr in reversed(tb)
                              if "/slime/" in fr.filename or "/megatron/" in fr.filename or "/sglang/" in fr.filename),
                             "outside the trainer's files")
                msg = " ".join(str(exc).split())[:300] or (tb[-1].line if tb else "")
                answer.update(accepted=False, reason=f"{type(exc).__name__} at {where}: {msg}")
            finally:
                import shutil

                shutil.rmtree(root, ignore_errors=True)
                sys.argv = saved_argv
                os.environ.clear()
                os.environ.update(saved_env)
            out.write(json.dumps(answer) + "\n")
            out.flush()
    os.replace(ns.out + ".tmp", ns.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
