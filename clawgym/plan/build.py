"""Resolved config -> launch plan: a pure function.

The plan is everything a launch does: the trainer argv (interpreter, script, every
flag once), the working dir, the Ray runtime env, how to start a local head and with
which environment. A dry run prints it; a launch submits exactly it.

Secrets never enter the plan: it names the environment variables a secret is read
from (``secret_env``), and the launcher reads the values at launch time.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from omegaconf import DictConfig

from clawgym.config.compose import to_plain
from clawgym.trainer.wandb_env import wandb_job_env

#: Interpreter that runs the trainer script inside the job.
INTERPRETER = "python3"

#: Environment variable -> where its value comes from, for docs and the migration table.
SGLANG_KEY_ENV = "SGLANG_API_KEY"
WANDB_KEY_TARGET = "WANDB_API_KEY"
#: The job env variable slime's TensorBoard writer takes its folder from (slime/utils/tensorboard_utils.py).
TENSORBOARD_DIR_ENV = "TENSORBOARD_DIR"
#: Where a save dir keeps the TensorBoard events, one folder per launch (its submission id).
TENSORBOARD_RELPATH = "tensorboard"


@dataclass
class LaunchPlan:
    """What a launch executes. ``to_dict`` is the content of ``launch_plan.json``."""

    # Interpreter, trainer script, then every trainer flag.
    entrypoint: List[str]
    # Directory the trainer runs in (uploaded by Ray as the job's working dir).
    working_dir: str
    # Given to Ray as the job's runtime env; ``env_vars`` holds no secret.
    runtime_env: Dict[str, Any]
    # ``ray start`` argv for a local head, or None when submitting to an existing cluster.
    ray_start: Optional[List[str]]
    # Environment the local head is started with (its processes and the job inherit it).
    ray_start_env: Dict[str, str]
    # Ray job submission id.
    submission_id: str
    # Dashboard address the job is submitted to.
    address: str
    # Target variable in the job -> variables of the launcher's environment it is read from.
    secret_env: Dict[str, List[str]] = field(default_factory=dict)
    # Where the launcher tees the job's output.
    log_file: Optional[str] = None
    # Training output dir (checkpoints, logs, snapshots).
    save_dir: Optional[str] = None
    # GPUs the job occupies while it runs (for packing sweep jobs on a cluster).
    gpus_required: int = 0
    # Run name (save dir and W&B run).
    run_name: str = ""
    # The per-GPU memory plan (``clawgym.memory.memory_plan(...).to_dict()``), attached by the
    # launcher (it depends on the GPU found on this node); None: not computed.
    memory: Optional[Dict[str, Any]] = None
    # Files clawgym writes at launch and passes by path (path -> text; clawgym/trainer/generated.py).
    files: Dict[str, str] = field(default_factory=dict)
    # Servers run inside the job before the trainer (services.*): name, argv, env, health_url...
    services: List[Dict[str, Any]] = field(default_factory=list)
    # gpu_layout=auto: the layout the search chose (its overrides, estimated step, runners-up;
    # ``clawgym.search.auto.resolve_auto``), attached by the launcher; None for a layout the user gave.
    layout: Optional[Dict[str, Any]] = None

    def to_dict(self) -> Dict[str, Any]:
        d = asdict(self)
        if d["memory"] is None:
            del d["memory"]
        if d["layout"] is None:
            del d["layout"]
        # Plans without generated files or services read as before (goldens, older snapshots).
        for key in ("files", "services"):
            if not d[key]:
                del d[key]
        return d

    @property
    def job_entrypoint(self) -> List[str]:
        """What the Ray job runs: the trainer, or the service supervisor around it."""
        if not self.services:
            return list(self.entrypoint)
        spec = services_spec_path(self.save_dir)
        return [INTERPRETER, supervisor_path(self.save_dir), spec, "--", *self.entrypoint]

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False) + "\n"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "LaunchPlan":
        return cls(**dict(data))


def _num(value: Any) -> str:
    """Render a number or string as a trainer argument."""
    if isinstance(value, bool):
        raise TypeError("booleans are flags, not values")
    return str(value)


class _Argv:
    """Collects trainer flags and refuses to emit one twice."""

    def __init__(self) -> None:
        self.args: List[str] = []
        self.seen: set = set()

    def _mark(self, flag: str) -> None:
        if flag in self.seen:
            raise ValueError(f"trainer flag {flag} emitted twice")
        self.seen.add(flag)

    def opt(self, flag: str, value: Any) -> None:
        """``flag value``, skipped when value is None."""
        if value is None:
            return
        self._mark(flag)
        self.args += [flag, _num(value)]

    def switch(self, flag: str, on: bool) -> None:
        """A store_true flag, present when on."""
        if on:
            self._mark(flag)
            self.args.append(flag)


def wandb_enabled(c: Mapping[str, Any], environ: Mapping[str, str]) -> bool:
    """W&B is on when forced, or (auto) when a key is in the launcher's environment."""
    enabled = c["wandb"]["enabled"]
    if enabled is None:
        return any(environ.get(name) for name in c["wandb"]["key_env"])
    return bool(enabled)


def gpus_required(c: Mapping[str, Any], effective: Optional[Mapping[str, Any]] = None) -> int:
    """GPUs the run holds: shared in colocate mode, disjoint otherwise (null keys count as the
    trainer will run them); a teacher server's GPUs come on top."""
    from clawgym.trainer.effective import effective_config

    e = effective if effective is not None else effective_config(c)
    g = e["gpu_layout"]
    extra = 0
    teacher = ((c.get("services") or {}).get("teacher") or {})
    if teacher.get("enabled") and not teacher.get("gpus"):
        extra = int(teacher.get("tp") or 1)
    actor = g["actor_gpus"] * g["actor_num_nodes"]
    return (max(actor, g["rollout_gpus"]) if g["colocate"] else actor + g["rollout_gpus"]) + extra


def trainer_flavour(c: Mapping[str, Any]) -> str:
    """The trainer flavour of a resolved config (configs from before flavours are the fork's)."""
    return str((c.get("trainer") or {}).get("flavour") or "clawgym")


def trainer_argv(c: Mapping[str, Any], *, use_wandb: bool) -> List[str]:
    """Every trainer flag of a resolved config, each once: the curated flags of the owner
    table (clawgym/trainer/flagmap.py, grouped as the seed script does), then ``args.*`` (by dest,
    sorted), then ``extra_args`` verbatim."""
    from clawgym.trainer.flagmap import ROWS, Context

    flavour = trainer_flavour(c)
    ctx = Context(use_wandb=use_wandb)
    a = _Argv()
    for row in ROWS:
        value = row.emitted(c, ctx)
        if value is None or value is False:
            continue
        if row.fork_only and flavour != "clawgym":
            # Validation refuses this first (trainer-flag-fork-only); never emit a flag the trainer lacks.
            raise ValueError(f"{row.flag} ({row.key}) exists only in the ClawGym fork, not in trainer={flavour}")
        if row.upstream_only and flavour == "clawgym":
            raise ValueError(f"{row.flag} ({row.key}) exists only in upstream slime, not in trainer={flavour}")
        if value is True:
            a.switch(row.flag, True)
        elif isinstance(value, (list, tuple)):
            # nargs flags (e.g. --spec MODULE FUNCTION): one token per item.
            a._mark(row.flag)
            a.args += [row.flag, *[_num(v) for v in value]]
        else:
            a.opt(row.flag, value)
    user_args = c.get("args") or {}
    if user_args:
        from clawgym.registry import load_registry
        from clawgym.trainer.args import render_arg

        reg = load_registry(flavour)
        for dest in sorted(user_args):
            tokens = render_arg(reg, dest, user_args[dest])
            if tokens:
                a._mark(tokens[0])
                a.args += tokens
    extra_flags = set()
    for item in c["extra_args"]:
        item = str(item)
        if item.startswith("--"):
            flag = item.split("=", 1)[0]
            # extra_args may repeat its own flag (append actions); never a flag generated above.
            if flag not in extra_flags:
                a._mark(flag)
                extra_flags.add(flag)
        a.args.append(item)
    return a.args


def job_env(c: Mapping[str, Any], effective: Optional[Mapping[str, Any]] = None) -> Dict[str, str]:
    """Environment of the trainer job: complete, so an existing cluster needs nothing else."""
    from clawgym.trainer.effective import effective_config

    eff = effective if effective is not None else effective_config(c)
    paths, r, e, s, sb = c["paths"], eff["rollout"], c["eval"], c["sglang"], c["sandbox"]
    node_ip = c["ray"]["node_ip"]
    env = {
        # Megatron-LM first, then the ClawGym-RL modules (rollout, API server), then slime.
        "PYTHONPATH": ":".join([paths["megatron"], paths["root"], paths["slime"]]),
        "CUDA_DEVICE_MAX_CONNECTIONS": "1",
        "PYTHONUNBUFFERED": "1",
        "PYTHONFAULTHANDLER": "1",
        "MASTER_ADDR": node_ip,
        # Loopback and the head node, each once (a loopback head is 127.0.0.1 itself).
        "no_proxy": ",".join(dict.fromkeys(["127.0.0.1", str(node_ip)])),
    }
    if not (c.get("trainer") or {}).get("agent_env", True) or sb["backend"] == "none":
        # No agent sandbox, or upstream slime: no OpenClaw gateways and no ClawGymRL API server
        # to configure. Otherwise, the fork's rollout and API-server hooks read this environment.
        return env
    env.update({
        "OPENCLAW_TRAIN_TASKS": paths["train_tasks"],
        "OPENCLAW_EVAL_TASKS": paths["eval_tasks"],
        "OPENCLAW_TRAIN_MAX_TURNS": str(r["train_max_turns"]),
        "OPENCLAW_EVAL_MAX_TURNS": str(e["max_turns"]),
        "OPENCLAW_TRAIN_NUM_WORKERS": str(r["train_num_workers"]),
        "OPENCLAW_EVAL_NUM_WORKERS": str(e["num_workers"]),
        "OPENCLAW_EVAL_N_SAMPLES": str(e["n_samples"]),
        # A non-empty rootfs switches the rollout code from Docker to chroot.
        "OPENCLAW_ROOTFS": sb["rootfs"] if sb["backend"] == "chroot" and sb["rootfs"] else "",
        "OPENCLAW_GATEWAY_IMAGE": sb["image"],
        "OPENCLAW_CONTEXT_WINDOW": str(r["max_context_len"]),
        "OPENCLAW_MAX_TOKENS": str(r["max_response_len"]),
        "OPENCLAW_RECORD_ENABLED": "1" if s["record"] else "0",
        "OPENCLAW_RECORD_FILE": paths["record_file"],
        "SERVED_MODEL_NAME": s["served_model_name"],
        "HOST": s["api_host"],
        "PORT": str(s["api_port"]),
        "TOOL_CALL_PARSER": s["tool_call_parser"] or "",
        "REASONING_PARSER": s["reasoning_parser"] or "",
    })
    return env


def tensorboard_dir(save: Optional[str], launch_id: str) -> Optional[str]:
    """The events folder of one launch: ``<save>/tensorboard/<submission id>`` (None without a save dir).

    One folder per launch, so a resumed run never appends to the previous launch's files and
    ``clawgym runs`` can tell the launches of a save dir apart."""
    return f"{str(save).rstrip('/')}/{TENSORBOARD_RELPATH}/{launch_id}" if save else None


def tensorboard_env(c: Mapping[str, Any], launch_id: str) -> Dict[str, str]:
    """``TENSORBOARD_DIR`` for the job when ``metrics.tensorboard`` is on (the flag is in flagmap.py).

    slime's writer needs the flag *and* a folder: with the flag alone and no ``--tb-project-name``
    it raises at the first metric (slime/utils/tensorboard_utils.py:_TensorboardAdapter.__init__)."""
    from clawgym.trainer.flagmap import tensorboard_on

    path = tensorboard_dir(c["paths"]["save"], launch_id)
    if not tensorboard_on(c) or path is None:
        return {}
    return {TENSORBOARD_DIR_ENV: path}


#: Turns on the dashboard's stack endpoint (``/worker/traceback``: py-spy by the node's agent), which
#: the supervisor's hang monitor and ``clawgym jobs stack`` use for processes on other nodes
#: (clawgym/supervisor/stacks.py). Ray leaves it off by default (ray/_private/ray_constants.py); it
#: gives no one a new power: whoever reaches the dashboard can already submit any code as a job.
PROFILING_ENV = {"RAY_DASHBOARD_ENABLE_PROFILING": "1"}


def head_env(c: Mapping[str, Any]) -> Dict[str, str]:
    """Environment a head clawgym starts gets: Ray's own health-check tuning (the seed's), and the
    dashboard's stack endpoint on (:data:`PROFILING_ENV`)."""
    ray = c["ray"]
    return {
        **PROFILING_ENV,
        "RAY_health_check_failure_threshold": str(ray["health_check_failure_threshold"]),
        "RAY_health_check_period_ms": str(ray["health_check_period_ms"]),
        "RAY_health_check_timeout_ms": str(ray["health_check_timeout_ms"]),
        "RAY_num_heartbeats_timeout": str(ray["num_heartbeats_timeout"]),
    }


def ray_start_argv(c: Mapping[str, Any]) -> Optional[List[str]]:
    """``ray start`` for a local head; None when an existing cluster is configured."""
    ray = c["ray"]
    if ray["address"] or _cluster_starts_ray(c):
        return None
    argv = ["ray", "start", "--head", "--node-ip-address", ray["node_ip"], "--port", str(ray["port"])]
    if ray["num_gpus"] is not None:
        argv += ["--num-gpus", str(ray["num_gpus"])]
    argv += [
        "--disable-usage-stats",
        "--dashboard-host", ray["dashboard_host"],
        "--dashboard-port", str(ray["dashboard_port"]),
    ]
    return argv


def _cluster_starts_ray(c: Mapping[str, Any]) -> bool:
    """cluster=slurm / kuberay: the batch job or the RayJob starts Ray, not the launcher."""
    return str((c.get("cluster") or {}).get("backend", "local")) in ("slurm", "kuberay")


def dashboard_address(c: Mapping[str, Any]) -> str:
    """The dashboard the job is submitted to; "" when the SLURM job or RayJob starts its own cluster."""
    ray = c["ray"]
    if _cluster_starts_ray(c) and not ray["address"]:
        return ""
    if ray["address"]:
        address = str(ray["address"])
        return address if "://" in address else f"http://{address}"
    host = ray["dashboard_host"]
    # A head listening on all interfaces is still reached through loopback from here.
    host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    return f"http://{host}:{ray['dashboard_port']}"


def secret_env(c: Mapping[str, Any], *, use_wandb: bool) -> Dict[str, List[str]]:
    """Secrets the job needs: target variable -> launcher variables to read, first set wins."""
    # The SGLang key is the ClawGymRL API server's; without a sandbox there is no server.
    names: Dict[str, List[str]] = {} if c["sandbox"]["backend"] == "none" else {SGLANG_KEY_ENV: [SGLANG_KEY_ENV]}
    if use_wandb:
        names[WANDB_KEY_TARGET] = list(c["wandb"]["key_env"])
    return names


def supervisor_path(save_dir: Optional[str]) -> str:
    """Where the pipeline copies clawgym/jobside/run_services.py for the job."""
    return under(str(save_dir), "clawgym", "run_services.py")


def services_spec_path(save_dir: Optional[str]) -> str:
    return under(str(save_dir), "clawgym", "services.json")


def services(c: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """Servers the job runs before the trainer (the OPD teacher), as the supervisor reads them."""
    out: List[Dict[str, Any]] = []
    t = ((c.get("services") or {}).get("teacher") or {})
    if t.get("enabled"):
        argv = [INTERPRETER, "-m", "sglang.launch_server", "--model-path", str(t["model_path"]),
                "--host", str(t["host"]), "--port", str(t["port"]), "--tp", str(t["tp"])]
        if t.get("mem_fraction_static") is not None:
            argv += ["--mem-fraction-static", str(t["mem_fraction_static"])]
        argv += [str(a) for a in t.get("extra_args") or []]
        host = "127.0.0.1" if t["host"] in ("0.0.0.0", "::", "") else t["host"]
        save = c["paths"]["save"]
        out.append({"name": "teacher", "argv": argv,
                    "env": {"CUDA_VISIBLE_DEVICES": str(t["gpus"])} if t.get("gpus") else {},
                    "health_url": f"http://{host}:{t['port']}{t['health_path']}",
                    "timeout_s": float(t["startup_timeout_s"]),
                    "log": under(save, "logs", "teacher.log") if save else None})
    return out


def submission_id(run_name: str, timestamp: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", run_name).strip("-") or "run"
    # The prefix marks jobs as clawgym's on a shared cluster.
    return f"{slug}-{timestamp}" if slug.startswith("clawgym") else f"clawgym-{slug}-{timestamp}"


def under(folder: str, *parts: str) -> str:
    """``folder/part/...`` without a doubled ``/`` when the folder was typed with a trailing one
    (``--save /ckpt/run/`` as a launch script writes it: the flag keeps it, the log path is ``/ckpt/run/logs``)."""
    return "/".join([str(folder).rstrip("/") or "", *parts]) if str(folder) != "/" else "/" + "/".join(parts)


def build_plan_from_dict(c: Mapping[str, Any], *, environ: Mapping[str, str], timestamp: str,
                         effective: Optional[Mapping[str, Any]] = None) -> LaunchPlan:
    """The plan for a resolved plain config.

    ``environ`` is consulted only for whether a W&B key is present (the seed's auto
    mode); no value from it is copied into the plan. ``effective``: the config as the trainer
    runs it, when the caller derived it already (derived here once otherwise); the argv is
    rendered from the config as written (null emits no flag).
    """
    from clawgym.trainer.effective import effective_config
    from clawgym.trainer.generated import generated_files

    eff = effective if effective is not None else effective_config(c)

    use_wandb = wandb_enabled(c, environ)
    save = c["paths"]["save"]
    sid = submission_id(c["run_name"], timestamp)
    svc = services(c)
    files = generated_files(c)
    if svc:
        files[services_spec_path(save)] = json.dumps({"services": svc}, indent=2) + "\n"
    return LaunchPlan(
        entrypoint=[INTERPRETER, c["gpu_layout"]["trainer_script"], *trainer_argv(c, use_wandb=use_wandb)],
        working_dir=c["paths"]["slime"],
        runtime_env={"env_vars": {**job_env(c, eff), **wandb_job_env(c, use_wandb=use_wandb), **tensorboard_env(c, sid),
                                  **{str(k): str(v) for k, v in c["extra_env"].items()}}},
        ray_start=ray_start_argv(c),
        ray_start_env=head_env(c),
        submission_id=sid,
        address=dashboard_address(c),
        secret_env=secret_env(c, use_wandb=use_wandb),
        log_file=under(save, "logs", f"train_{timestamp}.log") if save else None,
        save_dir=save,
        gpus_required=gpus_required(c, eff),
        run_name=c["run_name"],
        files=files,
        services=svc,
    )


def build_plan(cfg: DictConfig, *, environ: Mapping[str, str], timestamp: str) -> LaunchPlan:
    """The plan for a composed config (resolved here)."""
    return build_plan_from_dict(to_plain(cfg, resolve=True), environ=environ, timestamp=timestamp)


def equivalent_command(plan: LaunchPlan) -> str:
    """A copy-pasteable shell equivalent of the plan (secrets by name only)."""
    lines: List[str] = []
    if plan.ray_start is not None:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in plan.ray_start_env.items())
        lines.append(f"{env} {shlex.join(plan.ray_start)}")
    runtime_env = json.dumps(plan.runtime_env, sort_keys=True)
    lines.append(
        "ray job submit"
        f" --address {shlex.quote(plan.address)}"
        f" --submission-id {shlex.quote(plan.submission_id)}"
        f" --working-dir {shlex.quote(plan.working_dir)}"
        f" --runtime-env-json {shlex.quote(runtime_env)}"
        f" -- {shlex.join(plan.job_entrypoint)}"
    )
    return "\n".join(lines)


def format_plan(plan: LaunchPlan) -> str:
    """Human-readable plan for the console."""
    out = [f"run:            {plan.run_name}", f"submission id:  {plan.submission_id}",
           (f"ray address:    {plan.address}" + ("" if plan.ray_start is None else " (local head started by clawgym)")
            if plan.address else "ray address:    (a cluster the SLURM batch job or KubeRay RayJob starts)"),
           f"working dir:    {plan.working_dir}", f"save dir:       {plan.save_dir}",
           f"log file:       {plan.log_file}", f"GPUs held:      {plan.gpus_required}", "",
           f"trainer: {plan.entrypoint[0]} {plan.entrypoint[1]}"]
    args = plan.entrypoint[2:]
    i = 0
    while i < len(args):
        # A flag with every value that follows it (nargs flags take several).
        j = i + 1
        while j < len(args) and not args[j].startswith("--"):
            j += 1
        out.append("  " + " ".join(args[i:j]))
        i = j
    out += ["", "job environment:"]
    out += [f"  {k}={v}" for k, v in plan.runtime_env.get("env_vars", {}).items()]
    if plan.ray_start is not None:
        out += ["", "local head: " + shlex.join(plan.ray_start)]
        out += [f"  {k}={v}" for k, v in plan.ray_start_env.items()]
    if plan.services:
        out += ["", "services (started in the job before the trainer, stopped with it):"]
        out += [f"  {svc['name']}: {shlex.join(svc['argv'])}  (ready: {svc['health_url']})" for svc in plan.services]
    if plan.files:
        out += ["", "files written at launch:"] + [f"  {p}" for p in plan.files]
    if plan.secret_env:
        out += ["", "secrets (read from the environment at launch, never stored):"]
        out += [f"  {k} <- {' or '.join('$' + n for n in v)}" for k, v in plan.secret_env.items()]
    out += ["", "equivalent command:", equivalent_command(plan)]
    if plan.memory is not None:
        from clawgym.memory import format_memory

        out += ["", format_memory(plan.memory)]
    return "\n".join(out)
