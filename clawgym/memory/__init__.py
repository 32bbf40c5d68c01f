"""Will it fit? The per-GPU memory plan of a run: a pure function of the resolved config.

The second translation beside ``clawgym/plan.py``: ``memory_plan(c, gpu=None)`` estimates, per
GPU, the actor's train step and log-prob passes (``actor.py``), the SGLang engines' weights and
KV pool (``rollout.py``), how colocated phases take turns (``colocate.py``), host RAM per node
(``host.py``), against a GPU model (``gpus.py``). Which knobs would make a plan that does not fit
fit is a search over configs, above this package: ``clawgym.search.memory_plan`` (the plan with
that advice) and ``clawgym.search.advice``. No torch, no GPU query: ``gpu`` is what the caller
detected on this node (``gpus.detect``), used only when ``memory.gpu`` is null.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from clawgym.memory import gpus as G
from clawgym.memory.actor import CONSTANTS, actor_memory, context_len
from clawgym.memory.colocate import phase_peaks
from clawgym.memory.host import host_memory
from clawgym.memory.rollout import rollout_memory

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
            name = str(gpu.get("device"))
    if name is None:
        name, source = G.DEFAULT_GPU, f"assumed: no GPU found on this node, {G.DEFAULT_GPU} taken " \
                                      f"(set memory.gpu to the training nodes' GPU)"
    entry = G.GPUS.get(str(name))
    usable = entry.usable_gib if entry else (float(gib) - 0.5 if gib else G.GPUS[G.DEFAULT_GPU].usable_gib)
    if mem.get("gpu_memory_gib") is not None:
        usable, source = float(mem["gpu_memory_gib"]), source + "; memory.gpu_memory_gib overrides its size"
    return {"name": str(name), "usable": float(usable), "source": source}


def evaluate(c: Mapping[str, Any], gpu: Any = None) -> MemoryPlan:
    """The plan without advice (what advice re-evaluates each suggestion with)."""
    g = _gpu(c, gpu)
    usable = g["usable"]
    ctx = context_len(c)
    actor = actor_memory(c)
    rollout = rollout_memory(c, usable, ctx)
    host = host_memory(c, actor, rollout.concurrent_trajectories * ctx)
    groups_gib = actor.overhead_gib - CONSTANTS["fragmentation"] * max(actor.train_peak_gib, actor.logprob_peak_gib)
    phases = phase_peaks(c, actor, rollout, groups_gib)
    problems = []
    if phases["actor_gpu_peak_gib"] > usable:
        where = phases.get("phase", "split")
        what = "the actor's train step" if where in ("split", "train") else "the rollout phase"
        problems.append(f"{what} needs {phases['actor_gpu_peak_gib']:.1f} GiB per GPU, the "
                        f"{g['name']} has {usable:.1f} GiB")
    if rollout.engines == 0:
        pass  # no rollout engine (SFT): no KV cache to size
    elif rollout.kv_pool_gib <= 0:
        problems.append(f"SGLang's weights ({rollout.weights_gib:.1f} GiB per engine rank) leave no KV cache under "
                        f"mem_fraction_static={rollout.mem_fraction_static}")
    elif rollout.kv_tokens_per_engine < ctx:
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
    """The memory plan of a resolved plain config, without advice (``clawgym.search.memory_plan`` adds
    it); ``gpu``: this node's GPU (``gpus.detect``).
    Null curated keys count with the value the trainer will use (:func:`clawgym.effective.effective_config`)."""
    from clawgym.effective import effective_config

    return evaluate(effective_config(c), gpu)


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
             f"  trajectories       {r['trajectories_fit']} of {r['concurrent_trajectories']} fit at full context",
             f"  host RAM per node  {h['ram_gib_per_node']:7.1f} GiB",
             f"  GPU peak           {gib(ph['peak_gib'])}  ({ph.get('phase')})  "
             f"{'fits' if d['fits'] else 'DOES NOT FIT'}"]
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
