"""Will it fit? The per-GPU memory plan of a run: a pure function of the resolved config.

The second translation beside ``clawgym/plan/build.py``: ``memory_plan(c, gpu=None)`` estimates, per
GPU, the actor's train step and log-prob passes (``actor.py``), the SGLang engines' weights and
KV pool (``rollout.py``), how colocated phases take turns (``colocate.py``), host RAM per node
(``host.py``), against a GPU model (``gpus.py``). Which knobs would make a plan that does not fit
fit is a search over configs, above this package: ``clawgym.search.advice.memory_plan`` (the plan with
that advice) and ``clawgym.search.advice``. No torch, no GPU query: ``gpu`` is what the caller
detected on this node (``gpus.detect``), used only when ``memory.gpu`` is null.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Dict, List, Mapping, Optional

from clawgym.memory import gpus as G
from clawgym.memory.actor import CONSTANTS, actor_memory, context_len
from clawgym.memory.colocate import phase_peaks
from clawgym.memory.host import host_memory
from clawgym.memory.rollout import GIB, engine_tp_choices, rollout_memory, weights_per_rank

__all__ = ["MemoryPlan", "memory_plan", "format_memory", "evaluate"]


@dataclass
class MemoryPlan:
    """The plan; ``to_dict()`` is ``launch_plan.json["memory"]``."""

    gpu: str
    gpu_memory_gib: float
    gpu_source: str
    actor: Dict[str, Any]
    rollout: Dict[str, Any]
    host: Dict[str, Any]
    phases: Dict[str, Any]
    fits: bool
    problems: List[str] = field(default_factory=list)
    advice: List[str] = field(default_factory=list)
    advice_overrides: List[List[str]] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    @property
    def actor_peak_gib(self) -> float:
        """The actor's peak per GPU: its training phase where the plan has one (colocated, taking turns
        with the engines), else the actor GPU's peak."""
        return float(self.phases.get("train_phase_gib", self.phases["actor_gpu_peak_gib"]))


def _gpu(c: Mapping[str, Any], gpu: Any) -> Dict[str, Any]:
    mem = (c.get("memory") or {})
    name, source, gib = mem.get("gpu"), "memory.gpu", None
    if name is None and isinstance(gpu, str):
        name, source = gpu, "given"
    elif name is None and isinstance(gpu, Mapping) and gpu:
        name = gpu.get("gpu")
        gib = gpu.get("gpu_memory_gib")
        source = f"detected on this node ({gpu.get('device')})"
        if name is None:
            # Not a board of the table (gpus.match_model matches exact NVML names and memory):
            # planned with the memory it reports, and the plan says so.
            name = str(gpu.get("device"))
            source = (f"detected on this node ({name}, {float(gib):.1f} GiB): not in clawgym's GPU table, planned "
                      f"with its detected memory less {G.DRIVER_RESERVED_GIB} GiB the driver keeps" if gib else
                      f"detected on this node ({name}): not in clawgym's GPU table and its memory unknown, planned "
                      f"as {G.DEFAULT_GPU} (set memory.gpu_memory_gib to its usable memory)")
    if name is None:
        name, source = G.DEFAULT_GPU, f"assumed: no GPU found on this node, {G.DEFAULT_GPU} taken " \
                                      f"(set memory.gpu to the training nodes' GPU)"
    entry = G.GPUS.get(str(name))
    usable = entry.usable_gib if entry else (float(gib) - G.DRIVER_RESERVED_GIB if gib
                                             else G.GPUS[G.DEFAULT_GPU].usable_gib)
    if mem.get("gpu_memory_gib") is not None:
        usable, source = float(mem["gpu_memory_gib"]), source + "; memory.gpu_memory_gib overrides its size"
    return {"name": str(name), "usable": float(usable), "source": source}


def _no_kv_cache(c: Mapping[str, Any], rollout: Any, usable: float, gpu: str) -> str:
    """Why no engine gets a KV cache: its weights per rank against the static share, and whether a
    wider engine on these GPUs would leave room at all."""
    share = rollout.mem_fraction_static * usable
    text = (f"SGLang's weights are {rollout.weights_gib:,.1f} GiB per engine rank (sglang.tp={rollout.engine_tp}), "
            f"more than its static share of the {gpu} ({share:.1f} GiB at mem_fraction_static="
            f"{rollout.mem_fraction_static}): no room for a KV cache, no engine can serve")
    widest = max(engine_tp_choices(c) or [rollout.engine_tp])
    if widest > rollout.engine_tp:
        w = weights_per_rank(c["model"], widest) / GIB
        if w < share:
            return text + f"; set sglang.tp={widest} ({w:,.1f} GiB per rank)"
        return text + (f"; even the widest engine of these GPUs (sglang.tp={widest}) holds {w:,.1f} GiB per rank: "
                       "this model's rollout needs engines across nodes or GPUs with more memory")
    return text + "; this model's rollout needs wider engines (more GPUs per engine) or GPUs with more memory"


def _working_memory_short(c: Mapping[str, Any], rollout: Any, usable: float, gpu: str) -> str:
    """SGLang's static share and its working memory do not fit the GPU together."""
    top = max(0.0, (usable - rollout.working_gib - 0.75) / max(usable - 0.75, 1e-9))
    return (f"SGLang needs {rollout.static_gib + rollout.working_gib:.1f} GiB per GPU: its static share "
            f"{rollout.static_gib:.1f} GiB (mem_fraction_static={rollout.mem_fraction_static}) and "
            f"{rollout.working_gib:.1f} GiB of working memory outside it (CUDA graphs, activations; as SGLang's "
            f"ServerArgs._handle_gpu_memory_settings reserves it), the {gpu} has {usable:.1f} GiB: set "
            f"sglang.mem_fraction_static to at most {int(top * 100) / 100:.2f} (or null: SGLang picks it)")


def evaluate(c: Mapping[str, Any], gpu: Any = None) -> MemoryPlan:
    """The plan without advice (what advice re-evaluates each suggestion with)."""
    g = _gpu(c, gpu)
    usable = g["usable"]
    ctx = context_len(c)
    actor = actor_memory(c)
    rollout = rollout_memory(c, usable, ctx)
    host = host_memory(c, actor, rollout.concurrent_trajectories * ctx)
    groups_gib = actor.overhead_gib - CONSTANTS["fragmentation"] * max(actor.train_peak_gib, actor.logprob_peak_gib)
    # While SGLang is on its GPUs it holds its static share and its working memory (CUDA graphs, activations).
    on_gpu = replace(rollout, static_gib=round(rollout.static_gib + rollout.working_gib, 3))
    phases = phase_peaks(c, actor, on_gpu, groups_gib)
    problems = []
    if rollout.engines and rollout.kv_pool_gib <= 0:
        # The blocker, named first: without a KV cache no engine serves a token, whatever else fits.
        problems.append(_no_kv_cache(c, rollout, usable, g["name"]))
    if phases["actor_gpu_peak_gib"] > usable:
        where = phases.get("phase", "split")
        what = "the actor's train step" if where in ("split", "train") else "the rollout phase"
        problems.append(f"{what} needs {phases['actor_gpu_peak_gib']:.1f} GiB per GPU, the "
                        f"{g['name']} has {usable:.1f} GiB")
    if phases.get("phase") == "split" and rollout.engines and phases["rollout_gpu_peak_gib"] > usable:
        problems.append(_working_memory_short(c, rollout, usable, g["name"]))
    if rollout.engines == 0:
        pass  # no rollout engine (SFT): no KV cache to size
    elif rollout.kv_pool_gib > 0 and rollout.kv_tokens_per_engine < ctx:
        problems.append(f"an engine's KV cache holds {rollout.kv_tokens_per_engine} tokens, less than one "
                        f"trajectory at full context ({ctx})")
    notes = list(rollout.notes)
    if not rollout.notes and rollout.engines:
        notes.append(f"all {rollout.concurrent_trajectories} concurrent trajectories fit in the KV cache at full "
                     f"context ({rollout.trajectories_fit} would)")
    a = asdict(actor)
    a.pop("terms")
    a["terms"] = actor.terms
    return MemoryPlan(gpu=g["name"], gpu_memory_gib=round(usable, 2), gpu_source=g["source"], actor=a,
                      rollout={k: v for k, v in asdict(rollout).items() if k != "notes"}, host=host,
                      phases=phases, fits=not problems, problems=problems, notes=notes)


def memory_plan(c: Mapping[str, Any], gpu: Any = None) -> MemoryPlan:
    """The memory plan of a resolved plain config, without advice (``clawgym.search.advice.memory_plan`` adds
    it); ``gpu``: this node's GPU (``gpus.detect``).
    Null curated keys count with the value the trainer will use (:func:`clawgym.trainer.effective.effective_config`)."""
    from clawgym.trainer.effective import effective_config

    return evaluate(effective_config(c), gpu)


def trajectories_text(r: Mapping[str, Any]) -> str:
    """How many of the concurrent trajectories the KV cache holds at full context, in words that
    never read "48 of 32 fit"."""
    fit, want = r["trajectories_fit"], r["concurrent_trajectories"]
    if not r.get("engines"):
        return "no rollout engine: nothing is generated"
    if fit >= want:
        return f"all {want} concurrent fit at full context (room for {fit})"
    if fit == 0:
        return f"none of {want} concurrent fits at full context (one is larger than an engine's KV cache)"
    return f"{fit} of {want} concurrent fit at full context (SGLang queues the rest)"


def _verdict(d: Mapping[str, Any]) -> str:
    """fits / DOES NOT FIT, saying what does not fit when the GPU peak itself is within the GPU
    (the KV cache is then the reason)."""
    if d["fits"]:
        return "fits"
    if d["phases"]["peak_gib"] <= d["gpu_memory_gib"]:
        kv = any("KV cache" in p for p in d.get("problems") or [])
        return ("within the GPU, but the plan DOES NOT FIT: " +
                ("the KV cache is too small (problem below)" if kv else "see the problem below"))
    return "DOES NOT FIT"


def format_memory(d: Mapping[str, Any]) -> str:
    """A short table of a plan dict, for the console."""
    a, r, h, ph = d["actor"], d["rollout"], d["host"], d["phases"]
    gib = lambda x: f"{x:7.1f} GiB"  # noqa: E731
    lines = [f"memory plan per GPU ({d['gpu']}, {d['gpu_memory_gib']:.1f} GiB; {d['gpu_source']}):",
             f"  actor params       {a['params_total']:,} total, {a['params_per_gpu']:,} per GPU",
             f"  actor static       {gib(a['static_gib'])}  (weights {a['weights_gib']:.1f} + grads "
             f"{a['grads_gib']:.1f} + optimizer {a['optimizer_gpu_gib']:.1f})",
             f"  actor train peak   {gib(a['train_peak_gib'])}  (activations {a['activations_gib']:.1f}, logits "
             f"{a['logits_train_gib']:.1f}; {a['tokens_per_gpu']} tokens/GPU) + overhead {a['overhead_gib']:.1f}",
             f"  actor logprob peak {gib(a['logprob_peak_gib'])}",
             f"  rollout weights    {gib(r['weights_gib'])}  per engine rank (TP {r['engine_tp']}, "
             f"{r['engines']} engines)",
             f"  rollout KV pool    {gib(r['kv_pool_gib'])}  {r['kv_tokens_per_engine']:,} tokens/engine; needed "
             f"{r['kv_tokens_needed']:,} ({r['concurrent_trajectories']} x {r['context_len']})",
             f"  trajectories       {trajectories_text(r)}",
             f"  host RAM per node  {h['ram_gib_per_node']:7.1f} GiB",
             f"  GPU peak           {gib(ph['peak_gib'])}  of {d['gpu_memory_gib']:.1f} ({ph.get('phase')})  "
             f"{_verdict(d)}"]
    lines += [f"  problem: {p}" for p in d.get("problems") or []]
    lines += [f"  advice:  {x}" for x in d.get("advice") or []]
    return "\n".join(lines)


def this_node_gpu(c: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
    """This node's GPU (NVML, else nvidia-smi; the preflight's listing) when ``memory.gpu`` is null.

    The one impure step before the plan; None when the config names its GPU or none is found.
    """
    if (c.get("memory") or {}).get("gpu") is not None:
        return None
    try:
        return G.detect(G.node_gpus())
    except Exception:  # a broken driver is "no GPU found" here; the gpus check reports it
        return None
