"""Two-stage validation of a composed config, all violations at once.

Stage one checks each group on its own; stage two checks how groups fit together.
Every rule is a small function that appends :class:`Violation` s; nothing stops at
the first problem, so a user fixes everything in one round. All of it runs before any
process is started or file written.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from clawgym.config import to_plain
from clawgym.secrets import argv_secrets, env_secrets, known_secrets, redact, redact_value, remember


@dataclass
class Violation:
    """One broken rule: where, what it was, what the rule says, how to fix it."""

    # Dotted key paths involved.
    keys: List[str]
    # Their values, by key path.
    values: Dict[str, Any]
    # The rule, in words.
    rule: str
    # How to fix it.
    fix: str
    # Stable rule identifier (tests and skip lists refer to it).
    code: str = ""

    def format(self) -> str:
        vals = ", ".join(f"{k}={self.values.get(k)!r}" for k in self.keys)
        return f"[{self.code}] {vals}\n      rule: {self.rule}\n      fix:  {self.fix}"


class ConfigError(Exception):
    """Raised with every violation of a config; ``str()`` is the user-facing report."""

    def __init__(self, violations: Sequence[Violation], *, context: str = ""):
        self.violations = list(violations)
        self.context = context
        super().__init__(self.report())

    def report(self) -> str:
        n = len(self.violations)
        head = f"clawgym: invalid configuration{' (' + self.context + ')' if self.context else ''}: " \
               f"{n} problem{'s' if n != 1 else ''}"
        body = [f"  {i}. {v.format()}" for i, v in enumerate(self.violations, 1)]
        # Values are masked where collected; this pass also catches secrets inside rule or fix texts.
        return redact("\n".join([head, *body]))


def _get(c: Mapping[str, Any], path: str) -> Any:
    node: Any = c
    for part in path.split("."):
        node = node[part]
    return node


class _Collector:
    def __init__(self, c: Mapping[str, Any], environ: Mapping[str, str] = os.environ):
        self.c = c
        self.environ = environ
        # Secret variable -> value, from the launcher's environment (memory only).
        self.env_secrets = env_secrets(environ, _key_env(c))
        # Every value a report must mask: the environment's and those typed into the config.
        self.secrets = known_secrets(c, environ)
        self.out: List[Violation] = []

    def add(self, code: str, keys: Sequence[str], rule: str, fix: str, *, redact: bool = False) -> None:
        # A key that holds a secret is named but its value never echoed (reports reach logs);
        # any other value is shown with every known secret value masked in it.
        values = {k: "<redacted>" if redact else redact_value(_get(self.c, k), self.secrets) for k in keys}
        self.out.append(Violation(list(keys), values, rule, fix, code))

    def positive(self, code: str, keys: Sequence[str], what: str) -> None:
        for k in keys:
            v = _get(self.c, k)
            if v is not None and v <= 0:
                self.add(code, [k], f"{what} must be positive", f"set {k} to a value > 0")


Rule = Callable[[_Collector], None]


def _key_env(c: Mapping[str, Any]) -> List[str]:
    try:
        return [str(n) for n in c["wandb"]["key_env"] or []]
    except (KeyError, TypeError):
        return []


# ---------------------------------------------------------------- stage one: per group

def rule_gpu_counts_positive(v: _Collector) -> None:
    v.positive("gpu-counts-positive",
               ["gpu_layout.num_gpus", "gpu_layout.actor_num_nodes", "gpu_layout.actor_gpus",
                "gpu_layout.rollout_gpus"], "GPU and node counts")


def rule_trainer_matches_colocation(v: _Collector) -> None:
    g = v.c["gpu_layout"]
    want = "train.py" if g["colocate"] else "train_async.py"
    if g["trainer_script"] != want:
        mode = "colocated layouts run the synchronous trainer (train.py)" if g["colocate"] else \
            "split layouts run the asynchronous trainer (train_async.py), which asserts it is not colocated"
        v.add("trainer-matches-colocation", ["gpu_layout.colocate", "gpu_layout.trainer_script"], mode,
              f"set gpu_layout.trainer_script={want} or leave it unset (it follows gpu_layout.colocate)")


def rule_model_sizes_positive(v: _Collector) -> None:
    v.positive("model-sizes-positive",
               [f"model.{k}" for k in ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads",
                                      "num_query_groups", "kv_channels", "vocab_size", "rotary_base")],
               "model sizes")


def rule_query_groups_divide_heads(v: _Collector) -> None:
    m = v.c["model"]
    # None: no GQA (multi-latent attention), nothing to divide.
    if m["num_query_groups"] and m["num_query_groups"] > 0 and m["num_attention_heads"] % m["num_query_groups"]:
        v.add("query-groups-divide-heads", ["model.num_attention_heads", "model.num_query_groups"],
              "attention heads must be a multiple of the query groups",
              "use the checkpoint's num_key_value_heads for model.num_query_groups")


def rule_moe_complete(v: _Collector) -> None:
    m = v.c["model"]
    if m["num_experts"] is None:
        return
    for k in ("moe_ffn_hidden_size", "moe_router_topk"):
        if m[k] is None:
            v.add("moe-complete", ["model.num_experts", f"model.{k}"],
                  "a MoE model (num_experts set) needs its expert FFN size and router top-k",
                  f"set model.{k} from the checkpoint's config.json")
    if m["moe_router_topk"] is not None and m["moe_router_topk"] > m["num_experts"]:
        v.add("moe-topk-within-experts", ["model.moe_router_topk", "model.num_experts"],
              "the router cannot pick more experts than exist", "lower model.moe_router_topk")


def rule_model_family_fields(v: _Collector) -> None:
    m = v.c["model"]
    if m.get("multi_latent_attention"):
        for k in ("kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim"):
            if m.get(k) is None:
                v.add("mla-complete", ["model.multi_latent_attention", f"model.{k}"],
                      "multi-latent attention needs its KV rank and head dims",
                      f"set model.{k} from the checkpoint's config.json (kv_lora_rank, qk_nope_head_dim, "
                      "qk_rope_head_dim, v_head_dim)")
    spec = m.get("spec")
    if spec is not None and (len(spec) != 2 or not all(spec)):
        v.add("spec-module-and-function", ["model.spec"],
              "--spec takes the module and the function that builds the layer spec",
              "set model.spec=[slime_plugins.models.<module>,<function>] or null")


def rule_rollout_sizes_positive(v: _Collector) -> None:
    v.positive("rollout-sizes-positive",
               [f"rollout.{k}" for k in ("num_rollout", "batch_size", "n_samples_per_prompt", "max_response_len",
                                        "max_context_len", "num_steps_per_rollout", "train_num_workers",
                                        "train_max_turns")], "rollout sizes")


def rule_temperature_positive(v: _Collector) -> None:
    if v.c["rollout"]["temperature"] <= 0:
        v.add("temperature-positive", ["rollout.temperature"],
              "sampling temperature must be > 0 (slime rejects <= 0; GRPO needs diverse samples)",
              "set rollout.temperature to e.g. 0.7")


def rule_context_exceeds_response(v: _Collector) -> None:
    r = v.c["rollout"]
    if r["max_context_len"] is not None and r["max_context_len"] <= r["max_response_len"]:
        v.add("context-exceeds-response", ["rollout.max_context_len", "rollout.max_response_len"],
              "the context window must be larger than one response (it also holds the prompt and history)",
              "raise rollout.max_context_len or lower rollout.max_response_len")


def rule_eps_clip_order(v: _Collector) -> None:
    g = v.c["grpo"]
    if g["eps_clip"] <= 0:
        v.add("eps-clip-positive", ["grpo.eps_clip"], "the PPO clip range must be > 0", "set grpo.eps_clip, e.g. 0.2")
    if g["eps_clip_high"] < g["eps_clip"]:
        v.add("eps-clip-high-at-least-low", ["grpo.eps_clip_high", "grpo.eps_clip"],
              "the upper clip bound must be >= the lower one",
              "raise grpo.eps_clip_high (e.g. 0.28) or lower grpo.eps_clip")


def rule_kl_choices(v: _Collector) -> None:
    if v.c["grpo"]["kl_loss_type"] not in ("k1", "k2", "k3", "low_var_kl"):
        v.add("kl-loss-type-known", ["grpo.kl_loss_type"], "slime knows k1, k2, k3 and low_var_kl",
              "set grpo.kl_loss_type to one of k1, k2, k3, low_var_kl")


def rule_perf_sizes_positive(v: _Collector) -> None:
    v.positive("parallel-sizes-positive",
               [f"perf.{k}" for k in ("tensor_parallel", "pipeline_parallel", "context_parallel", "expert_parallel",
                                     "expert_tensor_parallel", "max_tokens_per_gpu", "log_probs_chunk_size")],
               "parallel sizes and batch limits")


def rule_dynamic_batch_needs_max_tokens(v: _Collector) -> None:
    p = v.c["perf"]
    if p["use_dynamic_batch_size"] and not p["max_tokens_per_gpu"]:
        v.add("dynamic-batch-needs-max-tokens", ["perf.use_dynamic_batch_size", "perf.max_tokens_per_gpu"],
              "dynamic batch size packs micro-batches by tokens and needs a per-GPU token budget",
              "set perf.max_tokens_per_gpu (e.g. 65536) or perf.use_dynamic_batch_size=false")


def rule_recompute_consistent(v: _Collector) -> None:
    p = v.c["perf"]
    if p["recompute_granularity"] not in (None, "full", "selective"):
        v.add("recompute-granularity-known", ["perf.recompute_granularity"],
              "Megatron knows full and selective recompute", "set perf.recompute_granularity to full, selective or null")
    if p["recompute_granularity"] == "selective" and p["recompute_method"] is not None:
        v.add("selective-recompute-no-method", ["perf.recompute_granularity", "perf.recompute_method"],
              "selective recompute takes no recompute method", "set perf.recompute_method=null")


def rule_optimizer(v: _Collector) -> None:
    o = v.c["optimizer"]
    if o["lr"] <= 0:
        v.add("lr-positive", ["optimizer.lr"], "the learning rate must be > 0", "set optimizer.lr, e.g. 1e-6")
    if o["cpu_offload"] and not o["use_precision_aware_optimizer"]:
        v.add("cpu-offload-needs-precision-aware", ["optimizer.cpu_offload", "optimizer.use_precision_aware_optimizer"],
              "Megatron's CPU optimizer offload requires the precision-aware optimizer",
              "set optimizer.use_precision_aware_optimizer=true or optimizer.cpu_offload=false")


def rule_eval(v: _Collector) -> None:
    v.positive("eval-sizes-positive", ["eval.interval", "eval.num_workers", "eval.max_turns", "eval.n_samples"],
               "eval interval and sizes")


def rule_sglang(v: _Collector) -> None:
    s = v.c["sglang"]
    v.positive("sglang-sizes-positive", ["sglang.tp", "sglang.context_length"], "SGLang engine sizes")
    if not 0 < s["mem_fraction_static"] <= 1:
        v.add("mem-fraction-in-range", ["sglang.mem_fraction_static"],
              "the static memory fraction is a share of GPU memory, in (0, 1]", "set sglang.mem_fraction_static, e.g. 0.8")
    if not 0 < s["api_port"] < 65536:
        v.add("api-port-in-range", ["sglang.api_port"], "ports are 1..65535", "set sglang.api_port, e.g. 30001")


def rule_sandbox(v: _Collector) -> None:
    s = v.c["sandbox"]
    if s["backend"] not in ("docker", "chroot", "none"):
        v.add("sandbox-backend-known", ["sandbox.backend"], "the sandbox is docker, chroot or none",
              "choose sandbox=docker, sandbox=chroot or sandbox=none")
    if s["backend"] == "none":
        # The ClawGym-RL hooks drive OpenClaw gateways: without a sandbox they cannot run.
        from clawgym.schema import RolloutConfig

        openclaw = {RolloutConfig.function_path, RolloutConfig.generate_function_path,
                    RolloutConfig.reward_function_path}
        for key in ("rollout.function_path", "eval.function_path", "rollout.generate_function_path",
                    "rollout.reward_function_path"):
            if _get(v.c, key) in openclaw:
                v.add("sandbox-none-without-openclaw-hooks", ["sandbox.backend", key],
                      "sandbox=none runs no OpenClaw gateway, but this hook is the ClawGym-RL one that drives them",
                      f"leave {key} at sandbox=none's value (slime's own), or set your hook, "
                      "or pick sandbox=docker/chroot")
    if s["backend"] == "chroot" and not s["rootfs"]:
        v.add("chroot-needs-rootfs", ["sandbox.backend", "sandbox.rootfs"],
              "the chroot sandbox needs the path of an OpenClaw rootfs",
              "set sandbox.rootfs=/path/to/openclaw/rootfs (the seed's OPENCLAW_ROOTFS)")
    if s["backend"] == "docker" and not s["image"]:
        v.add("docker-needs-image", ["sandbox.backend", "sandbox.image"], "the docker sandbox needs a gateway image",
              "set sandbox.image, e.g. clawgym-rl:v0.1")
    if not s["container_prefix"]:
        v.add("container-prefix-nonempty", ["sandbox.container_prefix"],
              "leftover cleanup matches containers by name prefix; an empty prefix matches everything",
              "set sandbox.container_prefix, e.g. clawgym-rl-")


#: Longest file name most filesystems take, in bytes (Linux NAME_MAX).
NAME_MAX = 255
#: The widest launch timestamp clawgym puts into submission ids (``%Y%m%d_%H%M%S``).
_TIMESTAMP_WIDTH = len("20260101_000000")
#: Room for the ``.<n>`` suffix that keeps same-second snapshot names apart.
_UNIQUE_SUFFIX_WIDTH = len(".99")
#: Room for a process id in temp names.
_PID_WIDTH = 7


def longest_derived_name(run_name: str, hostname: Optional[str] = None) -> str:
    """The longest file name clawgym derives from a run name: the temp dir its launch
    snapshot is written to (``.tmp-<submission id>.<n>-<host>-<pid>``; the submission id
    is ``clawgym-<run_name>-<timestamp>``)."""
    from clawgym.plan import submission_id

    sid = re.sub(r"[^A-Za-z0-9_.-]+", "-", submission_id(run_name, "0" * _TIMESTAMP_WIDTH))
    host = socket.gethostname() if hostname is None else hostname
    return f".tmp-{sid}{'9' * _UNIQUE_SUFFIX_WIDTH}-{host}-{'9' * _PID_WIDTH}"


def name_problem(name: Any) -> Optional[str]:
    """Why ``name`` cannot be one folder name, or None."""
    if not isinstance(name, str) or not name:
        return "it is empty"
    if name in (".", ".."):
        return f"{name!r} names the current or parent folder, not a folder of its own"
    if "/" in name:
        return "it contains '/', which would make it several nested folders"
    if "\0" in name:
        return "it contains a NUL character, which no path can hold"
    if name.strip() != name:
        return "it has surrounding spaces"
    return None


def rule_names(v: _Collector) -> None:
    """exp_name and run_name become folder names (the save dir, snapshot dirs): one safe component each."""
    for k in ("exp_name", "run_name"):
        name = v.c[k]
        if k == "run_name" and name == v.c["exp_name"]:
            continue  # derived from exp_name: reported there
        why = name_problem(name)
        if why is not None:
            v.add("names-are-folder-names", [k],
                  f"names become folder names (the save dir <paths.root>/exp/<run_name>, snapshot dirs): "
                  f"one plain name, not '.' or '..', no '/', no NUL, no surrounding spaces; here {why}",
                  f"set {k} to a plain name, e.g. {k}=my-run")
            continue
        longest = longest_derived_name(name)
        size = len(longest.encode())
        if size > NAME_MAX:
            room = len(name.encode()) - (size - NAME_MAX)
            v.add("name-within-name-max", [k],
                  f"{k} is {len(name.encode())} bytes; the longest folder name clawgym derives from it "
                  f"(the launch snapshot's temp dir '.tmp-clawgym-<name>-<timestamp>.<n>-<host>-<pid>') "
                  f"would be {size} bytes, over the filesystem's limit of {NAME_MAX} bytes per name",
                  f"shorten {k} to at most {max(room, 1)} bytes")
    save = v.c["paths"]["save"]
    if isinstance(save, str) and save:
        long = [p for p in Path(save).parts if len(p.encode()) > NAME_MAX]
        if long:
            v.add("name-within-name-max", ["paths.save"],
                  f"a folder name in paths.save is {len(long[0].encode())} bytes, over the filesystem's limit of "
                  f"{NAME_MAX} bytes per name",
                  "shorten that part of paths.save (or run_name, when paths.save derives from it)")


def rule_ray(v: _Collector) -> None:
    r = v.c["ray"]
    for k in ("port", "dashboard_port"):
        if not 0 < r[k] < 65536:
            v.add("ray-port-in-range", [f"ray.{k}"], "ports are 1..65535", f"set ray.{k} to a free port")
    if r["num_gpus"] is not None and r["num_gpus"] < 0:
        v.add("ray-gpus-nonnegative", ["ray.num_gpus"], "a head cannot declare negative GPUs",
              "set ray.num_gpus to the node's GPU count, or null to detect it")


LOCAL_RULES: List[Rule] = [
    rule_gpu_counts_positive, rule_trainer_matches_colocation, rule_model_sizes_positive,
    rule_query_groups_divide_heads, rule_moe_complete, rule_model_family_fields, rule_rollout_sizes_positive,
    rule_temperature_positive,
    rule_context_exceeds_response, rule_eps_clip_order, rule_kl_choices, rule_perf_sizes_positive,
    rule_dynamic_batch_needs_max_tokens, rule_recompute_consistent, rule_optimizer, rule_eval, rule_sglang,
    rule_sandbox, rule_names, rule_ray,
]


# ---------------------------------------------------------------- stage two: across groups

def rule_gpus_fit_node(v: _Collector) -> None:
    g = v.c["gpu_layout"]
    if min(g["num_gpus"], g["actor_gpus"], g["rollout_gpus"]) <= 0:
        return
    if g["colocate"]:
        for k in ("actor_gpus", "rollout_gpus"):
            if g[k] > g["num_gpus"] * (g["actor_num_nodes"] if k == "rollout_gpus" else 1):
                v.add("colocated-gpus-fit", [f"gpu_layout.{k}", "gpu_layout.num_gpus"],
                      "colocated training and inference share the node's GPUs",
                      f"lower gpu_layout.{k} to at most gpu_layout.num_gpus")
    elif g["actor_num_nodes"] == 1 and g["actor_gpus"] + g["rollout_gpus"] > g["num_gpus"]:
        v.add("split-gpus-fit", ["gpu_layout.actor_gpus", "gpu_layout.rollout_gpus", "gpu_layout.num_gpus"],
              f"in a split layout actor + rollout GPUs ({g['actor_gpus']} + {g['rollout_gpus']}) must fit "
              f"the node's {g['num_gpus']}",
              "lower gpu_layout.actor_gpus or gpu_layout.rollout_gpus, raise gpu_layout.num_gpus, "
              "or choose gpu_layout=colocate_8")
    elif g["actor_gpus"] > g["num_gpus"]:
        v.add("split-gpus-fit", ["gpu_layout.actor_gpus", "gpu_layout.num_gpus"],
              "actor GPUs per node cannot exceed the node's GPUs", "lower gpu_layout.actor_gpus")


def rule_tp_divides_actor_gpus(v: _Collector) -> None:
    g, p = v.c["gpu_layout"], v.c["perf"]
    world = g["actor_gpus"] * g["actor_num_nodes"]
    mp = p["tensor_parallel"] * p["pipeline_parallel"] * p["context_parallel"]
    if world > 0 and mp > 0 and world % mp:
        v.add("model-parallel-divides-actor-gpus",
              ["perf.tensor_parallel", "perf.pipeline_parallel", "perf.context_parallel", "gpu_layout.actor_gpus"],
              f"TP x PP x CP ({mp}) must divide the actor's GPUs ({world}); the rest is data parallel",
              "choose perf.tensor_parallel (and PP, CP) whose product divides gpu_layout.actor_gpus")


def rule_tp_fits_heads(v: _Collector) -> None:
    m, tp = v.c["model"], v.c["perf"]["tensor_parallel"]
    # Without GQA every head is its own group (Megatron sets num_query_groups = heads).
    heads = m["num_attention_heads"]
    groups = m["num_query_groups"] if m["num_query_groups"] is not None else heads
    if tp <= 0 or heads <= 0 or groups <= 0:
        return
    if heads % tp:
        v.add("tp-divides-heads", ["perf.tensor_parallel", "model.num_attention_heads"],
              f"each tensor-parallel rank holds whole attention heads: {heads} heads % TP {tp} != 0",
              "set perf.tensor_parallel to a divisor of model.num_attention_heads (and of the actor GPUs)")
    if groups % tp and tp % groups:
        v.add("tp-compatible-with-query-groups", ["perf.tensor_parallel", "model.num_query_groups"],
              f"query groups ({groups}) and TP ({tp}) must divide one another",
              "set perf.tensor_parallel to a divisor or multiple of model.num_query_groups")


def rule_sglang_tp_fits(v: _Collector) -> None:
    s, g, m = v.c["sglang"], v.c["gpu_layout"], v.c["model"]
    tp = s["tp"]
    if tp <= 0:
        return
    if g["rollout_gpus"] > 0 and g["rollout_gpus"] % tp:
        v.add("sglang-tp-divides-rollout-gpus", ["sglang.tp", "gpu_layout.rollout_gpus"],
              f"SGLang engines of {tp} GPUs must tile the {g['rollout_gpus']} rollout GPUs (slime leaves the rest idle)",
              "set sglang.tp to a divisor of gpu_layout.rollout_gpus")
    if m["num_attention_heads"] > 0 and m["num_attention_heads"] % tp:
        v.add("sglang-tp-divides-heads", ["sglang.tp", "model.num_attention_heads"],
              "SGLang shards attention heads across its tensor-parallel ranks",
              "set sglang.tp to a divisor of model.num_attention_heads")


def rule_context_lengths(v: _Collector) -> None:
    s, r = v.c["sglang"], v.c["rollout"]
    if s["context_length"] is not None and r["max_context_len"] is not None and \
            s["context_length"] < r["max_context_len"]:
        v.add("sglang-context-holds-rollout-context", ["sglang.context_length", "rollout.max_context_len"],
              "SGLang must accept the longest rollout context, or long conversations are rejected with 400",
              "raise sglang.context_length to at least rollout.max_context_len (or leave it unset to follow it)")


def rule_grpo_needs_group(v: _Collector) -> None:
    if v.c["grpo"]["advantage_estimator"] in ("grpo", "gspo") and v.c["rollout"]["n_samples_per_prompt"] <= 1:
        v.add("grpo-needs-several-samples", ["grpo.advantage_estimator", "rollout.n_samples_per_prompt"],
              "GRPO's baseline is the mean of several samples of the same prompt",
              "set rollout.n_samples_per_prompt to 2 or more (the seed uses 8)")


def rule_save_interval_needs_save(v: _Collector) -> None:
    if v.c["checkpoint"]["save_interval"] is not None and not v.c["paths"]["save"]:
        v.add("save-interval-needs-save-dir", ["checkpoint.save_interval", "paths.save"],
              "a save interval needs a directory to save to",
              "set paths.save, or checkpoint.save_interval=null to save nothing")
    if v.c["checkpoint"]["save_interval"] is not None and v.c["checkpoint"]["save_interval"] <= 0:
        v.add("save-interval-positive", ["checkpoint.save_interval"], "a save interval counts rollouts and must be > 0",
              "set checkpoint.save_interval, e.g. 5, or null")
    if v.c["paths"]["save"] and v.c["checkpoint"]["save_interval"] is None:
        v.add("save-dir-needs-interval", ["paths.save", "checkpoint.save_interval"],
              "Megatron requires a save interval whenever a save dir is given",
              "set checkpoint.save_interval, or paths.save=null to save nothing")


def rule_experts_divide(v: _Collector) -> None:
    m, p = v.c["model"], v.c["perf"]
    if m["num_experts"] is not None and p["expert_parallel"] > 0 and m["num_experts"] % p["expert_parallel"]:
        v.add("expert-parallel-divides-experts", ["perf.expert_parallel", "model.num_experts"],
              "expert parallel ranks hold equal shares of the experts",
              "set perf.expert_parallel to a divisor of model.num_experts")


# ---------------------------------------------------------------- the trainer's flags (registry)

def _registry(v: _Collector) -> Any:
    """The flag registry of the config's trainer flavour (None for an unknown flavour, reported by
    rule_trainer_flavour_known). A missing or broken data file is a broken install, not a config
    problem: its RegistryError propagates."""
    from clawgym.registry import FLAVOURS, load_registry

    flavour = (v.c.get("trainer") or {}).get("flavour", "clawgym")
    if flavour not in FLAVOURS:
        return None
    return load_registry(flavour)


def _other_flavour_has(flavour: str, *, dest: str = "", option: str = "") -> bool:
    from clawgym.registry import FLAVOURS, RegistryError, load_registry

    for other in FLAVOURS:
        if other == flavour:
            continue
        try:
            reg = load_registry(other)
        except RegistryError:
            continue
        if dest:
            from clawgym.trainer_args import lookup

            if lookup(reg, dest) is not None:
                return True
        if option and reg.by_option(option) is not None:
            return True
    return False


def _suggest(reg: Any, names: Sequence[str], *, as_args: bool) -> str:
    """Suggested names, each as the user would set it: ``args.<name>`` (or the flag), or the
    group key that owns it (``sglang.mem_fraction_static``)."""
    from clawgym.flagmap import owned_dests
    from clawgym.trainer_args import lookup

    owned = owned_dests(reg.flavour)
    out = []
    for name in names:
        flag = reg.by_option(name) if name.startswith("-") else lookup(reg, name)
        owner = owned.get(flag.dest) if flag is not None else None
        shown = f"args.{name}" if as_args else name
        out.append(f"{owner.key} ({flag.flag})" if owner else shown)
    return ", ".join(dict.fromkeys(out))


def rule_trainer_flavour_known(v: _Collector) -> None:
    from clawgym.registry import FLAVOURS

    flavour = (v.c.get("trainer") or {}).get("flavour", "clawgym")
    if flavour not in FLAVOURS:
        v.add("trainer-flavour-known", ["trainer.flavour"], f"the trainer flavours are {', '.join(FLAVOURS)}",
              f"choose trainer={' or trainer='.join(FLAVOURS)} (the group, not trainer.flavour)")


def rule_curated_flags_exist_in_trainer(v: _Collector) -> None:
    """Under upstream slime, a curated key must not emit a flag only the ClawGym fork has."""
    from clawgym.flagmap import Context, fork_only_rows, upstream_only_rows

    if (v.c.get("trainer") or {}).get("flavour", "clawgym") == "clawgym":
        for row in upstream_only_rows():
            value = row.emitted(v.c, Context(use_wandb=True))
            if value is None or value is False:
                continue
            v.add("trainer-flag-upstream-only", [row.key, "trainer.flavour"],
                  f"{row.flag} (from {row.key}) exists only in upstream slime; the ClawGym fork "
                  "(trainer=clawgym) has no such flag", f"set {row.key}=false, or choose trainer=slime")
    if (v.c.get("trainer") or {}).get("flavour", "clawgym") != "slime":
        return
    for row in fork_only_rows():
        value = row.emitted(v.c, Context(use_wandb=True))
        if value is None or value is False:
            continue
        off = "false" if row.kind == "switch" else "null"
        v.add("trainer-flag-fork-only", [row.key, "trainer.flavour"],
              f"{row.flag} (from {row.key}) exists only in the ClawGym fork; upstream slime (trainer=slime) "
              "has no such flag and would not do what it asks",
              f"set {row.key}={off}, or choose trainer=clawgym")


def rule_args(v: _Collector) -> None:
    """``args.<dest>``: a real flag of the flavour, not owned by a key, with a value of its type."""
    from clawgym.flagmap import SECRET_FLAGS, owned_dests
    from clawgym.trainer_args import check_arg, lookup

    user_args = v.c.get("args") or {}
    if not user_args:
        return
    reg = _registry(v)
    if reg is None:
        return
    flavour = reg.flavour
    owned = owned_dests(flavour)
    secret_dests = {f.lstrip("-").replace("-", "_") for f in SECRET_FLAGS}
    named_by: Dict[str, str] = {}
    for dest, value in user_args.items():
        key = f"args.{dest}"
        flag = lookup(reg, dest)
        if flag is not None and flag.dest in named_by:
            first = named_by[flag.dest]
            v.add("args-set-twice", [f"args.{first}", key],
                  f"args.{first} and {key} both set {flag.dest} ({', '.join(flag.option_strings)})",
                  f"keep one of args.{first} and {key}")
            continue
        if flag is not None:
            named_by[flag.dest] = dest
        if dest in secret_dests or (flag is not None and flag.flag in SECRET_FLAGS):
            v.add("no-secrets-in-argv", [key], "secrets never travel in argv (slime copies argv into W&B)",
                  f"remove {key} and export WANDB_API_KEY / SGLANG_API_KEY in the launcher's environment instead",
                  redact=True)
            continue
        if flag is not None and flag.dest in owned:
            owner = owned[flag.dest]
            how = "is derived from" if owner.kind == "derived" else "is set from"
            v.add("args-owned-by-key", [key], f"the trainer flag of {dest} {how} {owner.key}; one setting per flag",
                  f"remove {key} and set {owner.key} instead")
            continue
        if flag is None:
            if flavour == "slime" and _other_flavour_has(flavour, dest=dest):
                v.add("trainer-flag-fork-only", [key, "trainer.flavour"],
                      f"{dest} exists only in the ClawGym fork; upstream slime (trainer=slime) has no such flag",
                      f"remove {key}, or choose trainer=clawgym")
            elif flavour == "clawgym" and _other_flavour_has(flavour, dest=dest):
                v.add("trainer-flag-upstream-only", [key, "trainer.flavour"],
                      f"{dest} exists only in upstream slime; the ClawGym fork (trainer=clawgym) has no such flag",
                      f"remove {key}, or choose trainer=slime")
            else:
                near = reg.closest(dest)
                hint = f"did you mean {_suggest(reg, near, as_args=True)}? " if near else ""
                v.add("args-unknown-flag", [key], f"trainer={flavour} has no flag with dest {dest!r}",
                      f"{hint}`clawgym flags --trainer {flavour} PATTERN` lists the real ones; fix or remove {key}")
            continue
        problem = check_arg(reg, dest, value)
        if problem is None:
            continue
        if problem.code == "type":
            v.add("args-type", [key], problem.rule, problem.fix)
        elif problem.code == "choices":
            v.add("args-choices", [key], problem.rule, problem.fix)
        elif problem.code == "switch":
            v.add("args-switch-takes-bool", [key], problem.rule, problem.fix)
        elif problem.code == "nargs":
            v.add("args-nargs-takes-list", [key], problem.rule, problem.fix)
        else:
            v.add("args-not-settable", [key], problem.rule, problem.fix)


def rule_extra_args(v: _Collector) -> None:
    """``extra_args``: real flags of the flavour, values of their type, not owned by a key or ``args``."""
    from clawgym.flagmap import SECRET_FLAGS, owners
    from clawgym.trainer_args import check_extra_values, split_extra_args

    tokens = v.c["extra_args"]
    if not tokens:
        return
    orphans, occurrences = split_extra_args(tokens)
    # Also a secret flag inside one element ('--wandb-key VALUE') or as --flag=VALUE.
    if any(o.option in SECRET_FLAGS for o in occurrences) or _secret_flags_given(tokens):
        v.add("no-secrets-in-argv", ["extra_args"], "secrets never travel in argv (slime copies argv into W&B)",
              "export WANDB_API_KEY / SGLANG_API_KEY in the launcher's environment instead", redact=True)
        return
    if orphans:
        v.add("extra-args-value-without-flag", ["extra_args"],
              f"{orphans} come before any flag; every value must follow the flag it belongs to",
              "start extra_args with a --flag, e.g. extra_args=[--seed,7]")
    reg = _registry(v)
    if reg is None:
        return
    flavour = reg.flavour
    owned = owners(flavour)
    from clawgym.trainer_args import lookup

    arg_dests = {}
    for name in v.c.get("args") or {}:
        named = lookup(reg, name)
        if named is not None:
            arg_dests[named.dest] = name
    seen: Dict[str, int] = {}
    for occ in occurrences:
        opt = occ.option
        flag = reg.by_option(opt)
        if flag is None:
            if flavour == "slime" and _other_flavour_has(flavour, option=opt):
                v.add("trainer-flag-fork-only", ["extra_args", "trainer.flavour"],
                      f"{opt} exists only in the ClawGym fork; upstream slime (trainer=slime) has no such flag",
                      f"remove {opt} from extra_args, or choose trainer=clawgym")
            elif flavour == "clawgym" and _other_flavour_has(flavour, option=opt):
                v.add("trainer-flag-upstream-only", ["extra_args", "trainer.flavour"],
                      f"{opt} exists only in upstream slime; the ClawGym fork (trainer=clawgym) has no such flag",
                      f"remove {opt} from extra_args, or choose trainer=slime")
            else:
                prefixed = sorted(o for o in reg.option_strings if o.startswith(opt)) if opt.startswith("--") else []
                near = prefixed[:3] if len(prefixed) == 1 else reg.closest(opt)
                what = "is an abbreviation; clawgym takes whole flag names only" if len(prefixed) == 1 \
                    else f"is not a flag of trainer={flavour}"
                hint = f"did you mean {_suggest(reg, near, as_args=False)}? " if near else ""
                v.add("extra-args-unknown-flag", ["extra_args"], f"{opt} {what}",
                      f"{hint}`clawgym flags --trainer {flavour} PATTERN` lists the real ones; fix extra_args")
            continue
        if opt in owned or flag.flag in owned:
            owner = owned.get(opt) or owned[flag.flag]
            v.add("extra-args-not-generated", ["extra_args"],
                  f"{opt} is generated from {owner.key}; passing it again would be silently overridden",
                  f"remove {opt} from extra_args and set {owner.key} instead")
            continue
        if flag.dest in arg_dests:
            name = arg_dests[flag.dest]
            v.add("extra-args-set-in-args", ["extra_args", f"args.{name}"],
                  f"{opt} sets {flag.dest}, which args.{name} sets too; one setting per flag",
                  f"remove {opt} from extra_args (args.{name} is the typed way)")
            continue
        problem = check_extra_values(flag, occ)
        if problem is not None:
            v.add("extra-args-value", ["extra_args"], problem.rule, problem.fix)
        if flag.action not in ("append", "append_const", "extend", "count"):
            seen[flag.dest] = seen.get(flag.dest, 0) + 1
            if seen[flag.dest] == 2:
                v.add("extra-args-once", ["extra_args"],
                      f"{opt} sets {flag.dest} more than once; the trainer keeps only the last",
                      f"keep one {opt} in extra_args")


def _secret_names(c: Mapping[str, Any]) -> set:
    """Variables that hold a secret: the job's targets and where the W&B key is read from."""
    from clawgym.plan import SGLANG_KEY_ENV, WANDB_KEY_TARGET

    return {SGLANG_KEY_ENV, WANDB_KEY_TARGET, *c["wandb"]["key_env"]}


def rule_no_secrets_in_extra_env(v: _Collector) -> None:
    for name in sorted(_secret_names(v.c) & set(v.c["extra_env"])):
        v.add("no-secrets-in-extra-env", [f"extra_env.{name}"],
              "secrets are read from the environment at launch; extra_env is stored in snapshots and job metadata",
              f"remove extra_env.{name} and export {name} in the launcher's environment instead", redact=True)


def _secret_flags_given(args: Sequence[Any]) -> bool:
    """A secret flag anywhere in extra_args: its own element, ``--flag=value`` or inside one element."""
    from clawgym.secrets import SECRET_FLAGS

    words = [w for a in args for w in str(a).split()]
    return any(w == f or w.startswith(f + "=") for w in words for f in SECRET_FLAGS)


def rule_no_secret_values_in_config(v: _Collector) -> None:
    """No resolved value holds the value of a secret the launcher can see, whatever its key."""
    from clawgym.config import iter_leaves

    if not v.env_secrets:
        return
    for key, value in iter_leaves({k: val for k, val in v.c.items() if k != "hydra"}):
        text = str(value)
        names = [n for n, secret in v.env_secrets.items() if secret in text]
        if not names or (key.startswith("extra_env.") and key.split(".", 1)[1] in _secret_names(v.c)):
            continue  # none here, or an extra_env entry named after a secret (no-secrets-in-extra-env)
        v.add("no-secret-values-in-config", [key],
              f"{key} holds the value of ${', $'.join(names)}; the config is printed, written to "
              "launch_plan.json and snapshots, and given to Ray as job metadata",
              f"remove the value from {key} (and from the overrides); clawgym reads "
              f"{', '.join(names)} from the environment at launch and passes it to the job itself",
              redact=True)


def _real(path: str) -> Path:
    """Absolute, normalized, symlinks resolved as far as the path exists."""
    return Path(os.path.realpath(os.path.expanduser(path)))


def _run_save_dir(path: Path) -> bool:
    """True when ``path`` is the save dir of a clawgym run (it holds launch snapshots)."""
    from clawgym.snapshot import SNAPSHOTS_RELPATH

    try:
        return (path / SNAPSHOTS_RELPATH).is_dir()
    except OSError:
        return False


def runs_below(path: Path, *, depth: int = 3, budget: int = 2000) -> List[Path]:
    """Save dirs of other runs strictly below ``path`` (breadth-first, at most ``depth``
    levels and ``budget`` folders looked at; checkpoint and hidden folders are not entered)."""
    found: List[Path] = []
    level = [path]
    for _ in range(depth):
        nxt: List[Path] = []
        for d in level:
            try:
                entries = [e for e in os.scandir(d) if e.is_dir(follow_symlinks=False)]
            except OSError:
                continue
            for e in entries:
                if e.name.startswith(".") or e.name.startswith("iter_") or e.name == "clawgym":
                    continue
                budget -= 1
                if budget < 0:
                    return found
                child = Path(e.path)
                if _run_save_dir(child):
                    found.append(child)
                else:
                    nxt.append(child)
        level = nxt
    return found


def rule_save_dir_placement(v: _Collector) -> None:
    """The save dir is a folder of its own: not the checkout, not around or inside another run's."""
    save, root = v.c["paths"]["save"], v.c["paths"]["root"]
    if not isinstance(save, str) or not save:
        return
    s = _real(save)
    if isinstance(root, str) and root:
        r = _real(root)
        if s == r or s in r.parents:
            v.add("save-dir-not-checkout", ["paths.save", "paths.root"],
                  f"the save dir resolves to {s}, {'the checkout itself' if s == r else 'a folder above the checkout'}"
                  " (paths.root): the trainer would write iter_*/, logs/ and clawgym/snapshots/ among its files",
                  "give paths.save a folder of its own, e.g. leave paths.save at <paths.root>/exp/<run_name> "
                  "with a plain run_name")
            return
    for parent in s.parents:
        if _run_save_dir(parent):
            v.add("save-dir-inside-another-run", ["paths.save"],
                  f"the save dir {s} is inside {parent}, the save dir of another run (it holds clawgym/snapshots); "
                  "its checkpoints and retention would mix with this run's",
                  "set paths.save to a folder outside other runs' save dirs (or leave it at "
                  "<paths.root>/exp/<run_name> and choose another run_name)")
            return
    if s.is_dir() and not _run_save_dir(s):
        below = runs_below(s)
        if below:
            more = f" and {len(below) - 1} more" if len(below) > 1 else ""
            v.add("save-dir-above-another-run", ["paths.save"],
                  f"the save dir {s} holds the save dir of another run ({below[0]}{more}); "
                  "this run's checkpoints, logs and snapshots would land around it",
                  "set paths.save to a folder of its own, not a parent of other runs' save dirs "
                  "(or leave it at <paths.root>/exp/<run_name>)")


_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SLURM_TIME = re.compile(r"^(\d+(:\d+){0,2}|\d+-\d+(:\d+){0,2}|INFINITE|UNLIMITED)$")
_SLURM_MEM = re.compile(r"^\d+[KMGT]?$")


def rule_cluster(v: _Collector) -> None:
    """The cluster group's backend, and the settings each backend needs."""
    from clawgym.backends import BACKENDS

    backend, address = v.c["cluster"]["backend"], v.c["ray"]["address"]
    if backend not in BACKENDS:
        v.add("cluster-backend-known", ["cluster.backend"], f"the cluster backend is one of {', '.join(BACKENDS)}",
              "choose cluster=local, cluster=existing, cluster=slurm or cluster=kuberay")
        return
    if backend == "existing" and not address:
        v.add("existing-cluster-needs-address", ["cluster.backend", "ray.address"],
              "cluster=existing submits to a running Ray cluster, whose dashboard address is needed",
              "set ray.address=http://<head>:8265 (or choose cluster=local to start a head here)")
    if backend in ("slurm", "kuberay") and address:
        v.add("cluster-starts-its-own-ray", ["cluster.backend", "ray.address"],
              f"cluster={backend} starts its own Ray cluster; ray.address names another one",
              f"drop ray.address, or choose cluster=existing to use that cluster")
    if backend == "slurm":
        s = v.c["slurm"]
        v.positive("slurm-sizes-positive", ["slurm.nodes", "slurm.gpus_per_node", "slurm.cpus_per_node"],
                   "SLURM node, GPU and CPU counts")
        if s["signal_delay_s"] < 0:
            v.add("slurm-times-positive", ["slurm.signal_delay_s"],
                  "SLURM signals the job this many seconds before its time limit: 0 or more",
                  "set slurm.signal_delay_s to seconds, e.g. 120")
        if s["wait_nodes_s"] <= 0:
            v.add("slurm-times-positive", ["slurm.wait_nodes_s"], "the wait for the nodes' GPUs must be positive",
                  "set slurm.wait_nodes_s to seconds, e.g. 300")
        if s["time"] not in (None, "") and not _SLURM_TIME.match(str(s["time"])):
            v.add("slurm-time-format", ["slurm.time"],
                  "a SLURM time limit is minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS",
                  "set slurm.time e.g. to 4:00:00 or 2-00:00:00, or null for the partition's default")
        if s["mem_per_node"] not in (None, "") and not _SLURM_MEM.match(str(s["mem_per_node"])):
            v.add("slurm-mem-format", ["slurm.mem_per_node"],
                  "sbatch --mem takes a size with an optional K, M, G or T suffix (0 = all of the node's memory)",
                  "set slurm.mem_per_node e.g. to 480G, or null for the partition's default")
        bad = [str(x) for x in s["extra_sbatch"] if not str(x).startswith("-") or "\n" in str(x)]
        if bad:
            v.add("slurm-extra-sbatch-options", ["slurm.extra_sbatch"],
                  "each extra #SBATCH line is one sbatch option (starting with '-', one line)",
                  "write them as options, e.g. slurm.extra_sbatch=[--exclusive,--constraint=h100]")
        from clawgym.backends.slurm import allocation
        from clawgym.plan import gpus_required

        try:
            alloc, need = allocation(v.c), gpus_required(v.c)
        except (TypeError, ValueError, ZeroDivisionError):
            return
        if alloc.gpus < need:
            v.add("slurm-allocation-fits-run", ["slurm.nodes", "slurm.gpus_per_node"],
                  f"the allocation ({alloc.nodes} node(s) x {alloc.gpus_per_node} GPUs) must hold the run's "
                  f"{need} GPUs", "raise slurm.nodes / slurm.gpus_per_node, or leave them unset (sized from the "
                  "layout)")
        if alloc.nodes > 1 and alloc.gpus_per_node != v.c["gpu_layout"]["num_gpus"]:
            v.add("slurm-gpus-per-node-is-layouts", ["slurm.gpus_per_node", "gpu_layout.num_gpus"],
                  "on several nodes the trainer places work by gpu_layout.num_gpus per node",
                  "set slurm.gpus_per_node equal to gpu_layout.num_gpus (or leave it unset)")
    if backend == "kuberay":
        k = v.c["kuberay"]
        if not k["image"]:
            v.add("kuberay-needs-image", ["kuberay.image"],
                  "the RayJob's pods need an image with Ray, slime, Megatron-LM and the ClawGym-RL checkout",
                  "set kuberay.image=<registry>/<image>:<tag>")
        if not k["pvc"]:
            v.add("kuberay-needs-pvc", ["kuberay.pvc"],
                  "checkpoints must outlive the pods: the save dir lives on a PersistentVolumeClaim",
                  "set kuberay.pvc=<claim name> (mounted at kuberay.mount_path, default paths.save)")
        for key in ("name", "namespace"):
            if k[key] and (not _DNS1123.match(str(k[key])) or len(str(k[key])) > 63):
                v.add("kuberay-names-dns1123", [f"kuberay.{key}"],
                      "Kubernetes names are lowercase letters, digits and '-', at most 63 characters",
                      f"set kuberay.{key} to such a name")
        save = v.c["paths"]["save"]
        mount = str(k["mount_path"] or "")
        if save and mount and not (str(save) == mount or str(save).startswith(mount.rstrip("/") + "/")):
            v.add("kuberay-save-dir-on-pvc", ["paths.save", "kuberay.mount_path"],
                  "the save dir must be on the PVC, or checkpoints vanish with the pods",
                  "set kuberay.mount_path to paths.save or a parent of it")


CROSS_RULES: List[Rule] = [
    rule_gpus_fit_node, rule_tp_divides_actor_gpus, rule_tp_fits_heads, rule_sglang_tp_fits, rule_context_lengths,
    rule_grpo_needs_group, rule_save_interval_needs_save, rule_experts_divide, rule_no_secrets_in_extra_env,
    rule_trainer_flavour_known, rule_curated_flags_exist_in_trainer, rule_args, rule_extra_args,
    rule_no_secret_values_in_config, rule_save_dir_placement, rule_cluster,
]


def _unresolved(cfg: DictConfig) -> List[Violation]:
    """Keys left at ``???`` or whose interpolation fails, each with its unresolved value."""
    from omegaconf import OmegaConf

    from clawgym.config import iter_leaves

    raw = OmegaConf.to_container(cfg, resolve=False)
    assert isinstance(raw, dict)
    raw.pop("hydra", None)
    out: List[Violation] = []
    missing: List[str] = []
    failing: Dict[str, List[tuple]] = {}
    for key, value in iter_leaves(raw):
        if value == "???":
            missing.append(key)
            out.append(Violation([key], {key: value}, "a required value is not set",
                                 f"set {key}, or choose an option of its group that sets it", "value-required"))
            continue
        try:
            OmegaConf.select(cfg, key, throw_on_missing=False)
        except OmegaConfBaseException as exc:
            failing.setdefault(str(exc).splitlines()[0], []).append((key, value))
    for cause, keys in failing.items():
        # Keys derived from a missing key fail because of it: already reported.
        if any(m in cause for m in missing):
            continue
        # Keys derived from a broken key fail for the same cause: report the one that
        # does not interpolate another failing key (the source), once.
        names = {k.rsplit(".", 1)[-1] for k, _ in keys}
        sources = [(k, v) for k, v in keys
                   if not any(re.search(r"\$\{[^}]*\b" + re.escape(n) + r"\b", str(v)) for n in names - {k.rsplit(".", 1)[-1]})]
        key, value = (sources or keys)[0]
        out.append(Violation([key], {key: value}, f"the config does not resolve: {cause}",
                             f"fix the interpolation of {key} or give it a plain value", "resolves"))
    return out


def violations(cfg: DictConfig | Mapping[str, Any], *, environ: Optional[Mapping[str, str]] = None) -> List[Violation]:
    """Every violation of a composed config: local rules first, then cross-group rules.

    ``environ`` (default: this process's) is where the secrets come from that no config
    value may hold; every report masks them.
    """
    env = os.environ if environ is None else environ
    if isinstance(cfg, DictConfig):
        try:
            c = to_plain(cfg, resolve=True)
        except OmegaConfBaseException:
            # The rules need resolved values: report what does not resolve, and only that.
            found = _unresolved(cfg)
            values = known_secrets(None, env)
            for f in found:
                f.values = {k: redact_value(val, values) for k, val in f.values.items()}
            return found
    else:
        c = cfg
    # Secret values typed into extra_args are masked in every later report of this process too.
    try:
        remember(argv_secrets(c["extra_args"]))
    except (KeyError, TypeError):
        pass
    col = _Collector(c, env)
    for rule in LOCAL_RULES:
        rule(col)
    # A cross rule that cannot evaluate a broken group (already reported above) is skipped.
    for rule in CROSS_RULES:
        try:
            rule(col)
        except (TypeError, ZeroDivisionError, KeyError):
            pass
    return col.out


def validate(cfg: DictConfig | Mapping[str, Any], *, context: str = "",
             environ: Optional[Mapping[str, str]] = None) -> None:
    """Raise :class:`ConfigError` carrying every violation, if any."""
    found = violations(cfg, environ=environ)
    if found:
        raise ConfigError(found, context=context)
