"""The rollout side: SGLang engine settings, the sandbox, context lengths."""

from __future__ import annotations


from clawgym.validate.core import Collector, value_at


def rule_sglang(v: Collector) -> None:
    s = v.c["sglang"]
    v.positive("sglang-sizes-positive", ["sglang.tp", "sglang.context_length"], "SGLang engine sizes")
    # None: SGLang picks the fraction from the GPU's memory (ServerArgs), always in range.
    if s["mem_fraction_static"] is not None and not 0 < s["mem_fraction_static"] <= 1:
        v.add("mem-fraction-in-range", ["sglang.mem_fraction_static"],
              "the static memory fraction is a share of GPU memory, in (0, 1]", "set sglang.mem_fraction_static, e.g. 0.8")
    if not 0 < s["api_port"] < 65536:
        v.add("api-port-in-range", ["sglang.api_port"], "ports are 1..65535", "set sglang.api_port, e.g. 30001")


def rule_sandbox(v: Collector) -> None:
    s = v.c["sandbox"]
    if s["backend"] not in ("docker", "chroot", "none"):
        v.add("sandbox-backend-known", ["sandbox.backend"], "the sandbox is docker, chroot or none",
              "choose sandbox=docker, sandbox=chroot or sandbox=none")
    if s["backend"] == "none":
        # The ClawGym-RL hooks drive OpenClaw gateways: without a sandbox they cannot run.
        from clawgym.config.schema import RolloutConfig

        openclaw = {RolloutConfig.function_path, RolloutConfig.generate_function_path,
                    RolloutConfig.reward_function_path}
        for key in ("rollout.function_path", "eval.function_path", "rollout.generate_function_path",
                    "rollout.reward_function_path"):
            if value_at(v.c, key) in openclaw:
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


def rule_context_lengths(v: Collector) -> None:
    s, r = v.c["sglang"], v.c["rollout"]
    if s["context_length"] is not None and r["max_context_len"] is not None and \
            s["context_length"] < r["max_context_len"]:
        v.add("sglang-context-holds-rollout-context", ["sglang.context_length", "rollout.max_context_len"],
              "SGLang must accept the longest rollout context, or long conversations are rejected with 400",
              "raise sglang.context_length to at least rollout.max_context_len (or leave it unset to follow it)")


#: slime/backends/sglang_utils/sglang_config.py: ServerGroupConfig.__post_init__'s worker types.
SGLANG_WORKER_TYPES = ("regular", "prefill", "decode", "placeholder", "encoder")


def rule_sglang_config(v: Collector) -> None:
    """``sglang.models`` (slime's --sglang-config), checked as slime reads it.

    Mirrors slime/backends/sglang_utils/sglang_config.py:ServerGroupConfig.__post_init__ (worker type,
    num_gpus > 0) and slime/ray/rollout.py:_resolve_sglang_config (the groups' GPUs must equal
    --rollout-num-gpus); the file is written under paths.save, so a save dir is needed.
    """
    from clawgym.validate.core import Violation

    models = v.c["sglang"].get("models") or []
    if not models:
        return
    total = 0
    for i, m in enumerate(models):
        for j, g in enumerate(m.get("server_groups") or []):
            key = f"sglang.models[{i}].server_groups[{j}]"
            wkey, nkey = key + ".worker_type", key + ".num_gpus"
            types_text = "slime accepts these worker types: " + ", ".join(SGLANG_WORKER_TYPES)
            if g.get("worker_type") not in SGLANG_WORKER_TYPES:
                fix = f"set {wkey} to one of them, e.g. regular"
                values = {wkey: g.get("worker_type")}
                v.out.append(Violation([wkey], values, types_text, fix, "sglang-config-worker-type"))
            if not isinstance(g.get("num_gpus"), int) or g["num_gpus"] <= 0:
                rule, fix = "each server group holds at least one GPU", f"set {nkey} to a value > 0"
                values = {nkey: g.get("num_gpus")}
                v.out.append(Violation([nkey], values, rule, fix, "sglang-config-worker-type"))
            else:
                total += g["num_gpus"]
    rollout = v.c["gpu_layout"].get("rollout_gpus")
    if rollout is not None and total and total != rollout:
        v.add("sglang-config-gpus-match-rollout", ["sglang.models", "gpu_layout.rollout_gpus"],
              f"the server groups hold {total} GPUs; slime requires them to equal --rollout-num-gpus ({rollout})",
              f"set gpu_layout.rollout_gpus={total} or resize the groups' num_gpus")
    if not v.c["paths"].get("save"):
        v.add("sglang-config-needs-save", ["sglang.models", "paths.save"],
              "clawgym writes the --sglang-config file into the run's save dir", "set paths.save")

