#!/usr/bin/env python3
"""Judge trainer argvs with a trainer's own startup path on CPU, and return the parsed namespace.

Run by tools/measure_import.py with the interpreter of a trainer environment (tools/README.md):
for each request ``{"id", "script", "argv", "env", "files", "architectures", "model"}`` it sets
``sys.argv`` and runs tools/trainer_judge.py's own staged path (``_Judge.startup``): slime's real
``parse_args()`` (the four parsers, ``slime_validate_args``, Megatron's ``validate_args``,
``sglang_validate_args``), the driver's ``train()`` up to placement, engine 0's SGLang
``ServerArgs``, and rank 0 of the train actors (``initialize_model_parallel``, the micro-batch
calculator, ``TransformerConfig``). The answer is the namespace as ``parse_args`` returned it
(every dest, JSON-safe) and ``accepted``, or the refusal (stage, and argparse's message or the
exception and where in the trainer's files it was raised). A stage that cannot be judged for a
request is listed in ``not_judged`` with why: ``sglang-engine`` needs the checkpoint's
``config.json`` (written from the experiment's model group, ``model``), so without one it is not run.

Sources and stand-ins come from tools/trainer_env.py and the CUDA device answers from
tools/trainer_judge.py (``--tools DIR``: where those two live), so the two tools judge with the
same environment. Nothing here is imported by ``clawgym``.
"""

from __future__ import annotations

import argparse
import contextlib
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


def _copy_relative(argv, checkout, root):
    import shutil

    for tok in argv:
        value = tok.partition("=")[2] if tok.startswith("--") else tok
        if not value or value.startswith(("/", "-")) or ".." in value.split("/"):
            continue
        path = os.path.join(checkout, value)
        if os.path.isfile(path):
            os.makedirs(os.path.dirname(os.path.join(root, value)) or root, exist_ok=True)
            shutil.copy(path, os.path.join(root, value))


def _flag_value(argv, flag):
    for i, tok in enumerate(argv):
        if tok == flag and i + 1 < len(argv):
            return argv[i + 1]
        if tok.startswith(flag + "="):
            return tok.split("=", 1)[1]
    return None


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
    log = trainer_judge._Log()  # keeps a file descriptor: Megatron enables faulthandler at import
    with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        src = prepare_sources(ns, workdir, tool="import_judge")
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
    ns.path_root = "/clawgym-import-judge-root"  # unused: _rooted moves the paths here
    with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        judge = trainer_judge._Judge(ns, src, stand_ins)
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
            # The scripts run `python3 train.py` from the slime checkout, so relative paths name its
            # files (e.g. a --custom-config-path YAML of an example): the request runs in the root,
            # holding a copy of each checkout file the argv names relatively (the checkout is not written).
            _copy_relative(req["argv"], src.slime_root, root)
            saved_cwd = os.getcwd()
            os.chdir(root)
            current["architectures"] = list(req.get("architectures") or [])
            buf = trainer_judge._Log()
            answer = {"id": req["id"]}
            parsed = {}
            skip, not_judged = [], []
            hf = _flag_value(sys.argv, "--hf-checkpoint")
            if req.get("model") and hf and hf.startswith(root + "/"):
                judge._write_checkpoints(sys.argv, req["model"])
            else:
                skip.append("sglang-engine")
                not_judged.append("sglang-engine: no config.json for the checkpoint (the import gave no model "
                                  "group to write one from)" if not req.get("model") else
                                  "sglang-engine: no absolute --hf-checkpoint path to write a config.json under")
            try:
                def keep(args):
                    parsed.clear()
                    parsed.update({k: _unrooted(_safe(v), root) for k, v in sorted(vars(args).items())})

                verdict = judge.startup(req, buf, on_parsed=keep, skip=skip)
                if verdict.get("judged") is False and verdict.get("stage") == "sglang-engine":
                    # The engine's check could not run here: say so, and judge the train actor anyway.
                    not_judged.append(f"sglang-engine: {verdict['exception']}: "
                                      f"{_unrooted(' '.join(verdict['message'].split())[:200], root)} "
                                      "(a check this CPU environment cannot answer)")
                    skip.append("sglang-engine")
                    judge._reset()
                    verdict = judge.startup(req, buf, on_parsed=keep, skip=skip)
                if verdict.get("not_run"):
                    answer["not_run"] = verdict["not_run"]
                if verdict.get("judged") is False:
                    # Raised outside the trainer's files: the environment could not run this stage.
                    not_judged.append(f"{verdict['stage']} and later: {verdict['exception']} outside the trainer's "
                                      f"files: {_unrooted(' '.join(verdict['message'].split())[:200], root)}")
                    verdict = {"accepted": bool(parsed)}
                    if not parsed:
                        answer["judged"] = False
                if answer.get("judged") is False:
                    answer.update(accepted=False, reason="not judged: " + not_judged[-1])
                elif verdict["accepted"]:
                    answer.update(accepted=True, namespace=parsed)
                else:
                    where = verdict.get("where")
                    at = (f" at {os.path.basename(where['file'])}:{where['line']} {where['function']}"
                          if where else "")
                    msg = " ".join(str(verdict.get("message", "")).split())[:300] or (where or {}).get("code", "")
                    if verdict["exception"] == "SystemExit":
                        reason = f"parse: {msg}"
                    else:
                        reason = f"{verdict['stage']}: {verdict['exception']}{at}: {msg}"
                    answer.update(accepted=False, stage=verdict["stage"], reason=_unrooted(reason, root))
                    if parsed:
                        answer["namespace"] = parsed
                if not_judged:
                    answer["not_judged"] = not_judged
            finally:
                import shutil

                os.chdir(saved_cwd)
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
