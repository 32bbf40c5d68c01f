#!/usr/bin/env python3
"""Judge trainer command lines with a trainer flavour's own startup code, on CPU.

For each request (a trainer argv, the job environment and the model's architecture), this
runs, in the order a real launch meets them, the trainer's real code:

1. the driver: ``slime.utils.arguments.parse_args()`` on the argv -- the parser, slime's
   ``hf_validate_args`` against a local ``config.json`` written from the model zoo's
   architecture, ``slime_validate_args``, Megatron's real ``validate_args`` and
   ``sglang_validate_args`` -- then the driver script's own ``train()`` up to the point where it
   would allocate GPUs (``train_async.py`` asserts ``not args.colocate`` there);
2. the rollout engine: slime's ``_compute_server_args`` for engine 0 and SGLang's own
   ``ServerArgs(**kwargs)`` (its ``__post_init__`` checks tp/dp/ep/dp-attention);
3. a train actor (rank 0): ``torch.distributed`` on torch's ``fake`` backend with the world
   size of the layout, slime's ``initialize.init`` (Megatron's ``initialize_model_parallel``
   and the micro-batch calculator), then ``core_transformer_config_from_args`` ->
   ``TransformerConfig.__post_init__``.

The first refusal is the verdict: the stage, the exception and its message, and where in the
trainer's files it was raised (file, line, function, the source line: a bare ``assert`` has no
message, its line says what it checks). Everything that answers for missing hardware or
absent packages is listed in ``stand_ins`` of the output's meta line; nothing else is faked.
An exception raised outside the trainer's own files (a stand-in that was not enough) is no
verdict: ``"judged": false``.

Input: JSON lines ``{"id", "script", "argv", "env", "model"}`` (``--requests``); argv tokens
starting with ``--path-root`` are moved under a fresh temporary directory per request. Output:
one JSON line per request, after a first line ``{"meta": ...}``. Run it with the interpreter
of a trainer environment (tools/README.md), e.g. by tools/gen_trainer_verdicts.py.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import linecache
import logging
import os
import sys
import tempfile
import time
import traceback
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from trainer_env import add_source_options, prepare_sources  # noqa: E402

#: The Transformer Engine version each flavour's image installs (its docker/Dockerfile):
#: Megatron asks for TE's version in validate_args and TransformerConfig; TE itself needs CUDA.
TE_VERSION = {"clawgym": "2.10.0", "slime": "2.16.1"}

#: What a device query answers: one H100 SXM (compute capability 9.0, 80 GB).
H100 = {"name": "NVIDIA H100 80GB HBM3", "major": 9, "minor": 0, "total_memory": 80 * 1024 ** 3,
        "multi_processor_count": 132}

STAGES = ("parse", "hf-config", "slime-validate", "megatron-validate", "sglang-validate", "driver",
          "sglang-engine", "model-parallel", "microbatches", "actor-init", "transformer-config")


#: What a real launch checks that this path does not run.
NOT_JUDGED = [
    "Ray placement groups and GPU availability",
    "SGLang engine startup past ServerArgs (model loading: attention heads sharded over the attention TP, "
    "weights, CUDA graphs, memory)",
    "rollout engines other than engine 0 (slime builds them all from the same args)",
    "train actors other than rank 0; model construction, optimizer, checkpoint loading",
    "the real checkpoint's config.json (written from the model zoo's architecture)",
]


class _Log(io.StringIO):
    """Captured output that still has a file descriptor: Megatron's inference coordinator (imported
    through megatron.training when megatron.rl imports) calls ``faulthandler.enable()`` at import,
    which needs ``sys.stderr.fileno()``; a crash report goes to the real stderr."""

    def fileno(self):
        return sys.__stderr__.fileno()


class _Reached(Exception):
    """The driver got to where it allocates GPUs: every driver-side check has passed."""


class _StandIns:
    """Every stand-in installed, in words (the output lists them)."""

    def __init__(self):
        self.items = []

    def add(self, what, why):
        self.items.append({"what": what, "why": why})


def _install_device_stand_ins(flavour, reg):
    """Answer CUDA device queries as one H100 of an 8-GPU node would; everything else stays real."""
    import torch

    props = types.SimpleNamespace(**H100)
    torch.cuda.get_device_capability = lambda device=None: (H100["major"], H100["minor"])
    torch.cuda.get_device_properties = lambda device=None: props
    torch.cuda.get_device_name = lambda device=None: H100["name"]
    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: 8
    torch.cuda.current_device = lambda: 0
    torch.cuda.set_device = lambda device: None
    torch.cuda.synchronize = lambda device=None: None
    torch.cuda.manual_seed = lambda seed: None
    torch.cuda.manual_seed_all = lambda seed: None
    torch.cuda.mem_get_info = lambda device=None: (H100["total_memory"] - 2 * 1024 ** 3, H100["total_memory"])
    reg.add("torch.cuda device queries (get_device_capability, get_device_properties, get_device_name, "
            "is_available, device_count=8, current_device=0, mem_get_info)",
            "answered as an H100 80GB (compute capability 9.0) of an 8-GPU node; set_device, synchronize "
            "and manual_seed are no-ops")

    from megatron.core import utils as mcore_utils
    from packaging.version import Version

    mcore_utils._te_version = Version(TE_VERSION[flavour])
    reg.add(f"Transformer Engine version {TE_VERSION[flavour]}",
            "TE needs CUDA to import; Megatron's is_te_min_version is answered with the version the "
            "flavour's docker/Dockerfile installs")

    # TransformerConfig checks that TE's fused kernels exist (rope fusion, MoE permutation) by
    # testing Megatron's module-level names for None; the image's TE provides them.
    import importlib

    def _te_kernel(*a, **kw):
        raise RuntimeError("stand-in for a Transformer Engine kernel: never called by the checks judged")

    kernels = []
    for module, names in (("megatron.core.models.common.embeddings.rope_utils",
                           ("fused_apply_rotary_pos_emb", "fused_apply_rotary_pos_emb_thd")),
                          ("megatron.core.transformer.moe.moe_utils",
                           ("fused_permute", "fused_permute_with_probs", "fused_sort_chunks_by_index",
                            "fused_sort_chunks_by_index_with_probs", "fused_unpermute",
                            "fused_compute_score_for_moe_aux_loss", "fused_moe_aux_loss",
                            "fused_topk_with_score_function"))):
        mod = importlib.import_module(module)
        for name in names:
            if getattr(mod, name, None) is None:
                setattr(mod, name, _te_kernel)
                kernels.append(f"{module.rsplit('.', 1)[-1]}.{name}")
    reg.add("Transformer Engine fused kernels: " + ", ".join(kernels),
            "TransformerConfig only tests that these names are not None (TE installed); the image's TE "
            "provides them; they are never called")

    # torch.distributed: one process stands for rank 0 of the actor's world; every group it
    # creates (NCCL or gloo in a real run) is a group of torch's own fake backend.
    import torch.distributed as dist

    real_new_group = dist.new_group

    def new_group(*a, **kw):
        kw.pop("backend", None)
        kw.pop("pg_options", None)
        return real_new_group(*a, backend="fake", **kw)

    dist.new_group = new_group
    real_barrier = dist.barrier
    dist.barrier = lambda *a, **kw: None
    dist._clawgym_real_barrier = real_barrier
    reg.add("torch.distributed process groups",
            "rank 0 of the actor world on torch's 'fake' backend (FakeStore); every new_group (NCCL or "
            "gloo in a run) is a fake-backend group; barrier is a no-op")


class _Judge:
    def __init__(self, ns, src, reg):
        self.ns = ns
        self.src = src
        self.reg = reg
        self.roots = {
            os.path.join(src.slime_root, "slime") + os.sep: "slime/",
            os.path.join(src.megatron_root, "megatron") + os.sep: "megatron/",
            os.path.join(os.path.realpath(src.sglang_dir), "sglang") + os.sep: "sglang/",
        }
        self.scripts = {os.path.join(src.slime_root, s): s for s in ("train.py", "train_async.py")}
        import slime.utils.arguments as slime_arguments
        import importlib

        self.slime_arguments = slime_arguments
        self.drivers = {s: importlib.import_module(s[:-3]) for s in ("train.py", "train_async.py")}
        for mod in self.drivers.values():
            mod.create_placement_groups = self._reached
        reg.add("driver scripts' create_placement_groups",
                "raises at once: the driver's own checks before it (train_async.py: assert not "
                "args.colocate) run for real; Ray placement is not judged")

        from slime.backends.megatron_utils import initialize

        self.initialize = initialize
        initialize._set_random_seed = lambda *a, **kw: None
        initialize._build_tokenizer = lambda args: None
        reg.add("slime initialize._set_random_seed and _build_tokenizer",
                "no-ops: CUDA RNG seeding and loading a tokenizer from the checkpoint are no checks")
        import sglang.srt.server_args as server_args

        self.server_args = server_args
        from slime.backends.sglang_utils import sglang_engine

        self.sglang_engine = sglang_engine
        # The trainer's defaults for architecture fields the zoo may leave unset, from the flavour's
        # flag registry (generated from this same parser by tools/gen_flag_registry.py).
        registry = os.path.join(os.path.dirname(HERE), "clawgym", "registry", "data", f"{ns.flavour}.json")
        with open(registry) as f:
            actions = json.load(f)["actions"]
        self.defaults = {a["dest"]: a["default"] for a in actions if a["dest"] in ("norm_epsilon", "layernorm_epsilon", "rotary_base")}

    @staticmethod
    def _reached(*a, **kw):
        raise _Reached()

    # ---------------------------------------------------------------- where it was refused
    def _trainer_frame(self, tb):
        """Innermost traceback frame in the trainer's own files: (relative file, line, function)."""
        found = None
        for frame, lineno in traceback.walk_tb(tb):
            path = os.path.realpath(frame.f_code.co_filename)
            rel = self.scripts.get(path)
            if rel is None:
                for root, prefix in self.roots.items():
                    if path.startswith(root):
                        rel = prefix + path[len(root):]
                        break
            if rel is not None:
                found = (rel, lineno, frame.f_code.co_name, path)
        return found

    def _where(self, exc):
        frame = self._trainer_frame(exc.__traceback__)
        if frame is None:
            return None
        rel, lineno, func, path = frame
        code = _statement(path, lineno)
        return {"file": rel, "line": lineno, "function": func, "code": code}

    # ---------------------------------------------------------------- one request
    def judge(self, req):
        t0 = time.monotonic()
        out = {"id": req["id"]}
        with tempfile.TemporaryDirectory(prefix="clawgym-judge-") as root:
            argv = [t.replace(self.ns.path_root, root, 1) if t.startswith(self.ns.path_root) else t
                    for t in req["argv"]]
            self._write_checkpoints(argv, req["model"])
            saved_env = dict(os.environ)
            saved_argv = sys.argv
            log = _Log()
            os.environ.update({k: str(v) for k, v in (req.get("env") or {}).items() if k != "PYTHONPATH"})
            sys.argv = [req["script"], *argv]
            try:
                # "skip": stages the caller already found unjudgeable here (tools/gen_layout_starts.py
                # re-judges a request whose engine stage met an accelerator probe without that stage).
                out.update(self.startup(req, log, skip=tuple(req.get("skip") or ())))
            finally:
                sys.argv = saved_argv
                os.environ.clear()
                os.environ.update(saved_env)
            for key in ("message", "traceback"):
                if isinstance(out.get(key), str):
                    out[key] = out[key].replace(root, self.ns.path_root)
            if out.get("where"):
                out["where"]["code"] = out["where"]["code"].replace(root, self.ns.path_root)
        out["seconds"] = round(time.monotonic() - t0, 3)
        return out

    def startup(self, req, log, on_parsed=None, skip=()):
        """Run every stage on the ``sys.argv`` and environment already set; the verdict as a dict
        (``accepted``, or the stage, exception, message and where). ``on_parsed(args)`` sees the
        namespace right after ``parse_args`` (before later stages touch it); stages in ``skip``
        (e.g. ``sglang-engine`` without a checkpoint config.json) are not run, and the caller says
        so. tools/import_judge.py calls this too, so both tools judge one path."""
        out = {}
        stage = ["parse"]
        self.not_run = []
        try:
            with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                self._run(req, stage, on_parsed, skip)
            out["accepted"] = True
        except SystemExit as exc:
            out.update(accepted=False, stage="parse", exception="SystemExit",
                       message=_argparse_message(log.getvalue(), exc))
        except Exception as exc:  # the verdict: where and why the trainer refused
            where = self._where(exc)
            out.update(accepted=False, stage=_stage_of(where, stage[0]), exception=type(exc).__name__,
                       message=str(exc)[:2000], where=where)
            if where is None or isinstance(exc, ImportError) or _probes_hardware(where):
                # Raised outside the trainer's code, a module missing from this environment, or a
                # check of the machine's accelerator kind (CPU torch: torch.version.cuda is None):
                # the environment could not run the check, no verdict of the trainer.
                out["judged"] = False
                out["traceback"] = "".join(traceback.format_exception(exc))[-3000:]
        finally:
            self._reset()
        if self.not_run:
            out["not_run"] = list(self.not_run)
        return out

    def _write_checkpoints(self, argv, model):
        """The checkpoint dirs the argv names, each with the config.json of the model's architecture."""
        from hf_config_json import config_json

        data = config_json(model, self.defaults)
        for flag in ("--hf-checkpoint", "--ref-load"):
            if flag in argv:
                path = argv[argv.index(flag) + 1]
                os.makedirs(path, exist_ok=True)
                with open(os.path.join(path, "config.json"), "w") as f:
                    json.dump(data, f)

    def _run(self, req, stage, on_parsed=None, skip=()):
        stage[0] = "parse"
        args = self.slime_arguments.parse_args()
        if on_parsed is not None:
            on_parsed(args)
        stage[0] = "driver"
        try:
            self.drivers[req["script"]].train(args)
        except _Reached:
            pass
        # slime/ray/rollout.py RolloutManager.__init__ starts no engine with --debug-train-only (SFT,
        # --load-debug-rollout-data); slime/utils/arguments.py parse_args builds no train actor with
        # --debug-rollout-only: a stage the run does not reach is not run (listed in "not_run").
        if getattr(args, "debug_train_only", False):
            self.not_run.append("sglang-engine: --debug-train-only starts no rollout engine")
        elif "sglang-engine" not in skip:
            stage[0] = "sglang-engine"
            self._engine(args)
        else:
            self.not_run.append("sglang-engine: skipped by the caller")
        if getattr(args, "debug_rollout_only", False):
            self.not_run.append("actor-init, transformer-config: --debug-rollout-only builds no train actor")
            return
        stage[0] = "actor-init"
        self._actor(args)

    def _engine(self, args):
        """Engine 0's server args as slime computes them, checked by SGLang's own ServerArgs."""
        import inspect

        fn = self.sglang_engine._compute_server_args
        params = inspect.signature(fn).parameters
        kw = dict(rank=0, dist_init_addr="127.0.0.1:29600", nccl_port=29601, host="127.0.0.1", port=30000)
        kw = {k: v for k, v in kw.items() if k in params}
        result = fn(args, **kw)
        kwargs = result[0] if isinstance(result, tuple) else result
        self.server_args.ServerArgs(**kwargs)

    def _actor(self, args):
        """Rank 0 of the train actors: process groups, slime's init, the TransformerConfig."""
        import torch.distributed as dist
        from torch.testing._internal.distributed.fake_pg import FakeStore

        world = args.actor_num_nodes * args.actor_num_gpus_per_node
        os.environ.update({"RANK": "0", "WORLD_SIZE": str(world), "LOCAL_RANK": "0",
                           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"})
        dist.init_process_group(backend="fake", store=FakeStore(), rank=0, world_size=world)
        args.rank = dist.get_rank()
        args.world_size = dist.get_world_size()
        self.initialize.init(args)
        from megatron.training.arguments import core_transformer_config_from_args

        cfg_args = args
        if getattr(args, "megatron_to_hf_mode", None) == "bridge":
            # megatron.bridge builds the TransformerConfig from config.json and copies only
            # TP/PP/EP/ETP/SP from args (slime model_provider.get_model_provider_func): the
            # recompute flags never reach it. megatron.bridge is not installed: the config is
            # built from args, which hold the same architecture (hf_validate_args checked it),
            # with the recompute fields at their unset values as the bridge leaves them.
            cfg_args = copy.copy(args)
            cfg_args.recompute_granularity = None
            cfg_args.recompute_method = None
            cfg_args.recompute_num_layers = None
        core_transformer_config_from_args(cfg_args)

    def _reset(self):
        """Leave no state of one request for the next: process groups, Megatron's globals."""
        import torch.distributed as dist
        from megatron.core import mpu
        from megatron.core import num_microbatches_calculator as nmc
        from megatron.training import global_vars

        try:
            mpu.destroy_model_parallel()
        except Exception:
            pass
        if dist.is_initialized():
            dist.destroy_process_group()
        nmc._GLOBAL_NUM_MICROBATCHES_CALCULATOR = None
        global_vars.destroy_global_vars()


def _statement(path, lineno):
    """The source statement at lineno (with its continuation lines, up to 6), stripped."""
    lines = []
    for i in range(lineno, lineno + 6):
        text = linecache.getline(path, i)
        if not text:
            break
        lines.append(text.strip())
        joined = " ".join(lines)
        if joined.count("(") <= joined.count(")") and not joined.endswith(("\\", ",")):
            break
    return " ".join(lines)


#: SGLang's accelerator-kind probes (sglang/srt/utils/common.py): false on a CPU torch, whatever
#: the device stand-ins answer; a refusing statement that calls one judges the machine, not the config.
_HARDWARE_PROBES = ("is_cuda()", "is_cuda_alike()", "is_hip()", "is_npu()", "is_musa()", "is_xpu()")


def _probes_hardware(where):
    return bool(where) and any(p in where.get("code", "") for p in _HARDWARE_PROBES)


def _argparse_message(text, exc):
    lines = [line for line in text.splitlines() if "error:" in line]
    return (lines[-1] if lines else text.strip().splitlines()[-1] if text.strip() else f"exit {exc.code}")[:2000]


#: Functions whose frame names the stage of a refusal (innermost match wins).
_STAGE_OF_FUNCTION = [
    ("slime/", "hf_validate_args", "hf-config"), ("slime/", "_hf_validate_args", "hf-config"),
    ("slime/utils/arguments.py", "slime_validate_args", "slime-validate"),
    ("slime/utils/arguments.py", "_resolve_eval_datasets", "slime-validate"),
    ("megatron/training/arguments.py", "validate_args", "megatron-validate"),
    ("slime/backends/megatron_utils/arguments.py", "validate_args", "megatron-validate"),
    ("slime/backends/sglang_utils/arguments.py", "validate_args", "sglang-validate"),
    ("train", "train", "driver"),
    ("slime/backends/sglang_utils/sglang_engine.py", "", "sglang-engine"),
    ("sglang/", "", "sglang-engine"),
    ("megatron/core/parallel_state.py", "", "model-parallel"),
    ("megatron/core/num_microbatches_calculator.py", "", "microbatches"),
    ("megatron/core/transformer/", "", "transformer-config"),
    ("megatron/core/model_parallel_config.py", "", "transformer-config"),
    ("megatron/training/arguments.py", "core_transformer_config_from_args", "transformer-config"),
    ("slime/backends/megatron_utils/initialize.py", "", "actor-init"),
    ("slime/utils/arguments.py", "parse_args", "parse"),
    ("megatron/training/arguments.py", "parse_args", "parse"),
]


def _stage_of(where, current):
    if where is None:
        return current
    for prefix, func, stage in _STAGE_OF_FUNCTION:
        if where["file"].startswith(prefix) and (not func or where["function"] == func):
            # The driver-side parse_args also calls the four validators: prefer the stage tracked
            # by position (parse) only when the frame itself is a parse function.
            return stage
    return current


def main(argv=None):
    ap = argparse.ArgumentParser(description="Judge trainer argvs with a trainer flavour's own startup code.")
    ap.add_argument("flavour", choices=sorted(TE_VERSION), help="trainer flavour")
    add_source_options(ap)
    ap.add_argument("--requests", required=True, help="JSON-lines file of requests ('-': stdin)")
    ap.add_argument("--out", default="-", help="JSON-lines output ('-': stdout)")
    ap.add_argument("--path-root", default="/clawgym-judge-root",
                    help="argv tokens starting with this are moved under a temporary directory per request")
    ns = ap.parse_args(argv)
    # A terminated judge still removes its patched copies (the finally below).
    import signal

    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    workdir = tempfile.mkdtemp(prefix="clawgym-judge-src-")
    reg = _StandIns()
    out = sys.stdout if ns.out == "-" else open(ns.out + ".tmp", "w")
    try:
        src = prepare_sources(ns, workdir, tool="trainer_judge")
        for spec in src.stand_ins.versions:
            reg.add(f"module {spec}", "imported at module level by SGLang/transformers, never called by the "
                                      "code judged (tools/README.md)")
        t0 = time.monotonic()
        log = _Log()
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            import torch  # noqa: F401

            _install_device_stand_ins(ns.flavour, reg)
            judge = _Judge(ns, src, reg)
        logging.disable(logging.WARNING)
        import_s = round(time.monotonic() - t0, 2)
        with (sys.stdin if ns.requests == "-" else open(ns.requests)) as f:
            requests = [json.loads(line) for line in f if line.strip()]
        import hf_config_json

        reg.add(f"config.json max_position_embeddings={hf_config_json.UNKNOWN_WINDOW} where the zoo has no "
                "window (model.context_window, else model.max_position_embeddings)",
                "the checkpoint's own context window is not in the model zoo; SGLang's check of the "
                "context length against it is not judged for that model")
        meta = {"flavour": ns.flavour, "stand_ins": reg.items, "not_judged": NOT_JUDGED, "import_s": import_s,
                "stand_in_imports": sorted(src.stand_ins.served), "stages": list(STAGES)}
        print(json.dumps({"meta": meta}), file=out, flush=True)
        for req in requests:
            print(json.dumps(judge.judge(req)), file=out, flush=True)
        print(json.dumps({"config_json": hf_config_json.USED}), file=out, flush=True)
    finally:
        if out is not sys.stdout:
            out.close()
            os.replace(ns.out + ".tmp", ns.out)
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
