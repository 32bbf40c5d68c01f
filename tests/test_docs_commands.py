"""Every command README.md and docs/ show is run, with the outcome the docs give it.

Commands are taken from fenced ``bash`` and ``console`` blocks (docs/contributing.md has the
convention). Each must have an entry in ``OUTCOMES`` (run here), point at the test that runs it,
or carry a ``# not run: <reason>`` line in its block. The harness runs the commands in a temporary
folder where ``clawgym demo`` has run (the tour's first command, run for real): its checkout is
``$CLAWGYM_RL_ROOT`` and its runs are real save dirs. ``python train.py`` is this checkout's
train.py and ``clawgym`` is ``python -m clawgym``; what would launch on GPUs is run as a dry run
(``dry_run=true``; ``clawgym resume --dry-run``), so a launch command's outcome is its validation
and memory plan.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^```(\w*)\s*$")
NOT_RUN = "# not run:"


# ---------------------------------------------------------------- extraction

@dataclass
class Documented:
    where: str  # file:line
    command: str
    not_run: Optional[str] = None


def documents() -> List[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def extract(path: Path) -> List[Documented]:
    """Commands of the ``bash``/``console`` blocks of one page (continuations joined, comments dropped)."""
    return extract_text(path.read_text(), path)


def extract_text(text: str, path: Path) -> List[Documented]:
    """:func:`extract` of a page's text."""
    out: List[Documented] = []
    lang: Optional[str] = None
    pending: Optional[str] = None
    buf: Optional[str] = None
    for no, line in enumerate(text.splitlines(), 1):
        if lang is None:
            m = FENCE.match(line)
            if m:
                lang = m.group(1) or "text"
            continue
        if line.startswith("```"):
            lang, pending, buf = None, None, None
            continue
        if lang not in ("bash", "console"):
            continue
        text = line
        if lang == "console" and buf is None:
            if text.startswith("$ "):
                text = text[2:]
            elif not text.strip().startswith(NOT_RUN):
                continue  # the command's output
        s = text.strip()
        if buf is None and s.startswith(NOT_RUN):
            pending = s[len(NOT_RUN):].strip()
            continue
        if buf is None and (not s or s.startswith("#")):
            continue
        buf = f"{buf} {s}" if buf else s
        if buf.endswith("\\"):
            buf = buf[:-1].rstrip()
            continue
        command = " ".join(re.sub(r"\s+#\s.*$", "", buf).split())
        name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        out.append(Documented(f"{name}:{no}", command, pending))
        buf, pending = None, None
    return out


def documented() -> List[Documented]:
    return [d for p in documents() for d in extract(p)]


# ---------------------------------------------------------------- outcomes

@dataclass(frozen=True)
class Outcome:
    kind: str  # accepted, declined, refused, fits, does_not_fit, contains, preflight_fails, covered_by, env, ci
    texts: Tuple[str, ...] = ()
    # Where it runs: "work" (the folder where clawgym demo ran) or "checkout" (the demo's checkout).
    cwd: str = "work"


def accepted(*texts: str, cwd: str = "work") -> Outcome:
    """Exit 0 (and each text in the output)."""
    return Outcome("accepted", texts, cwd)


def refused(code: str) -> Outcome:
    """Refused before anything started, naming the rule ``[code]``."""
    return Outcome("refused", (code,))


def declined(*texts: str, cwd: str = "work") -> Outcome:
    """Exit 2 (clawgym.common.exit_codes.REFUSED) for bad input to a command, each text in the output."""
    return Outcome("declined", texts, cwd)


def fits(*texts: str) -> Outcome:
    """Exit 0; every job's memory plan ends in ``fits``."""
    return Outcome("fits", texts)


def does_not_fit() -> Outcome:
    """The memory plan of at least one job says ``DOES NOT FIT`` (a dry run shows it; a launch is refused)."""
    return Outcome("does_not_fit")


def preflight_fails(*checks: str) -> Outcome:
    """On this machine (no GPU, no gateway image) the preflight refuses, naming these checks."""
    return Outcome("preflight_fails", checks)


def covered_by(test: str) -> Outcome:
    """Another test runs exactly this; the harness checks that the test exists."""
    return Outcome("covered_by", (test,))


def sets_env() -> Outcome:
    """``export NAME=VALUE``: the harness sets it (to the demo's checkout) for the commands after it."""
    return Outcome("env")


def ci_runs_it() -> Outcome:
    """The test command: .ci/run ends with exactly this line."""
    return Outcome("ci")


DEMO_RUN = "clawgym-demo/ClawGym-RL/exp/clawgym-rl-4b-instruct-2507_optimizer.lr="
TRAIN_ARGS = "python train.py args.lr_warmup_iters=10 args.sglang_ep_size=8"
SLURM_32B = ("python train.py model=qwen3_32b gpu_layout.actor_num_nodes=2 gpu_layout.actor_gpus=8 "
             "gpu_layout.rollout_gpus=8 sglang.tp=2 memory.gpu=h100_80gb")
SPLIT_1_1_16K = "python train.py -m gpu_layout=split_1_1 rollout.max_context_len=16384 perf.max_tokens_per_gpu=16384"

#: Every documented command that is run here, by its text as documented.
OUTCOMES: Dict[str, Outcome] = {
    # install and the two commands
    "python3 -m venv .venv && source .venv/bin/activate": covered_by(
        "tests/test_demo.py::test_clawgym_comes_from_the_fresh_venvs_install_not_this_checkout"),
    "pip install -e .": covered_by("tests/test_demo.py::test_clawgym_comes_from_the_fresh_venvs_install_not_this_checkout"),
    "pip install -e . && python train.py paths.root=/path/to/ClawGym-Agents/RL": fits(),
    "pip install -e '.[test]' && python -m pytest tests -q -n 2": ci_runs_it(),
    # the tour
    "clawgym demo": accepted("==> 4/4", "report.html (2 runs)"),
    "export CLAWGYM_RL_ROOT=$PWD/clawgym-demo/ClawGym-RL": sets_env(),
    "python train.py dry_run=true": fits("launch_plan.json"),
    "python train.py gpu_layout=colocate_8 rollout.batch_size=16 sglang.mem_fraction_static=0.7 dry_run=true": fits("--colocate"),
    "python train.py --cfg job --resolve": accepted("rollout:", "temperature: 0.7"),
    "python train.py model=qwen2_5_0_5b dry_run=true": refused("tp-divides-heads"),
    "python train.py model=qwen2_5_0_5b perf.tensor_parallel=2 dry_run=true": fits(),
    "python train.py -m gpu_layout=split_1_1 optimizer.lr=1e-6,4e-6 memory.gpu=h100_80gb dry_run=true": does_not_fit(),
    f"{SPLIT_1_1_16K} optimizer.lr=1e-6,4e-6 memory.gpu=h100_80gb dry_run=true": fits(),
    "clawgym runs clawgym-demo/ClawGym-RL/exp --sort reward --desc": accepted("optimizer.lr=4e-6", "succeeded"),
    "clawgym report clawgym-demo/ClawGym-RL/exp --out clawgym-demo/report.html": accepted("(2 runs)"),
    f"clawgym show {DEMO_RUN}4e-6": accepted("optimizer.lr=4e-6"),
    # day to day
    "python train.py model=qwen3_4b gpu_layout=split_4_4": fits(),
    "python train.py preflight_only=true": preflight_fails("gpus"),
    "python train.py ray.address=http://head-node:8265": fits("http://head-node:8265"),
    TRAIN_ARGS: fits("--lr-warmup-iters 10", "--sglang-ep-size 8"),
    "python train.py --info defaults-tree": accepted("gpu_layout: split_4_4"),
    "clawgym flags warmup": accepted("--lr-warmup-iters"),
    "clawgym runs": accepted("optimizer.lr=1e-6", "optimizer.lr=4e-6"),
    "clawgym report --out report.html": accepted("(2 runs)"),
    "python train.py -m gpu_layout=split_4_4,colocate_8 rollout.train_num_workers=32,64 sglang.mem_fraction_static=0.7": fits(),
    # guide
    f"{TRAIN_ARGS} args.moe_enable_deepep=true args.eval_prompt_data='[aime,/data/aime.jsonl]'": fits("--moe-enable-deepep"),
    "clawgym flags --trainer slime 'sglang-ep*' --json": accepted('"--sglang-ep-size"'),
    "python train.py model=qwen3_8b gpu_layout=split_2_6 rollout.max_context_len=32768 perf.max_tokens_per_gpu=32768 "
    "dry_run=true": fits(),
    "clawgym runs clawgym-demo/ClawGym-RL/exp": accepted("succeeded"),
    f"clawgym show {DEMO_RUN}1e-6": accepted("iter_0000002"),
    f"clawgym resume {DEMO_RUN}1e-6 rollout.temperature=0.8 --dry-run": accepted("--rollout-temperature", "0.8"),
    "python train.py preflight_only=true paths.root=/path/to/ClawGym-Agents/RL": preflight_fails("gpus"),
    "python train.py paths.root=/path/to/ClawGym-Agents/RL": fits(),
    f"{SLURM_32B} cluster=slurm slurm.partition=gpu slurm.time=2-00:00:00 slurm.account=rl slurm.cpus_per_node=96 "
    "slurm.mem_per_node=0 'slurm.extra_sbatch=[--exclusive]'": fits("#SBATCH --nodes=3", "#SBATCH --gres=gpu:8",
                                                                  "#SBATCH --exclusive"),
    f"{SLURM_32B} cluster=kuberay kuberay.image=registry.example/clawgym-rl:0.1 kuberay.pvc=clawgym-runs "
    "kuberay.namespace=rl dry_run=true": fits("rayjob.yaml", "nvidia.com/gpu"),
    # docs/guide/when-a-run-dies.md: a supervised run's batch script and RayJob.
    "python train.py cluster=slurm slurm.time=4:00:00 slurm.signal_delay_s=300 restart.max_attempts=5 "
    "memory.gpu=h100_80gb": fits("#SBATCH --requeue", "#SBATCH --signal=B:USR1@300", "#SBATCH --open-mode=append",
                                 "clawgym.supervisor.slurm_runner"),
    "python train.py cluster=kuberay kuberay.image=registry.example/clawgym-rl:0.1 kuberay.pvc=clawgym-runs "
    "restart.max_attempts=5 memory.gpu=h100_80gb dry_run=true": fits("backoffLimit: 5", "resume_load.py"),
    "python train.py sandbox=none model=qwen2_5_3b perf.tensor_parallel=2 'extra_args=[--prompt-data,/data/dapo-math-17k.jsonl,--input-key,"
    "prompt,--label-key,label,--rm-type,deepscaler]'": accepted("--rm-type deepscaler"),
    "python train.py dry_run=true memory.gpu=h100_80gb": fits("trajectories       24 of 64 concurrent fit"),
    "python train.py model=qwen3_235b_a22b gpu_layout=colocate_8 perf.tensor_parallel=4 optimizer.cpu_offload=false "
    "memory.gpu=h100_80gb dry_run=true": does_not_fit(),
    "python train.py model=qwen3_4b gpu_layout=colocate_1 optimizer.cpu_offload=false rollout.max_context_len=131072 "
    "memory.gpu=h100_80gb dry_run=true": does_not_fit(),
    "clawgym show <save>": accepted("overrides"),
    "clawgym diff <save-a> <save-b>": accepted("--lr"),
    'clawgym diff <save> "rollout.temperature=0.8 gpu_layout=colocate_8"': accepted("--rollout-temperature", "--colocate"),
    "clawgym resume <save> rollout.temperature=0.8 --dry-run": accepted("--rollout-temperature"),
    f"{SPLIT_1_1_16K} optimizer.lr=1e-6,4e-6": fits(),
    "clawgym runs exp/ --sort reward --desc": accepted("succeeded", cwd="checkout"),
    'clawgym runs exp/ --where status=running --where "reward>0.5" --json': accepted("[]", cwd="checkout"),
    "clawgym runs exp/ --metric eval/clawgym_eval,train/loss --last 10": accepted("train/loss", cwd="checkout"),
    "clawgym runs exp/ --plot rollout/raw_reward,eval/clawgym_eval --out plots/ --smooth 0.6": accepted(
        "rollout_raw_reward", cwd="checkout"),
    "clawgym report exp/ --out report.html": accepted("(2 runs)", cwd="checkout"),
    "clawgym runs exp/ --columns name,status,reward,step_s --sort reward --desc": accepted(
        "run", "status", "reward(last 5)", "succeeded", cwd="checkout"),
    "clawgym runs exp/ --columns name,rewrd": declined("no column 'rewrd'; did you mean 'reward'?", cwd="checkout"),
    # docs/guide/when-a-run-dies.md, "Seeing it" (the demo's runs were never supervised: no attempts).
    "clawgym runs clawgym-demo/ClawGym-RL/exp --columns name,status,health,attempts,last_class,gpu_time_lost_s": accepted(
        "health", "succeeded", "ckpt/"),
    "clawgym runs clawgym-demo/ClawGym-RL/exp --json": accepted('"rules_tripped": []', '"checkpoints_complete"'),
    # import
    "clawgym import RL/run_qwen3_4b.sh": covered_by(
        "tests/test_import.py::test_seed_below_the_repository_top_imports_its_paths_relative_to_its_root"),
}


# ---------------------------------------------------------------- the harness

@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A folder where ``clawgym demo`` ran, and the environment the documented commands run in."""
    folder = tmp_path_factory.mktemp("docs_commands")
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_ADDRESS", "WANDB_API_KEY", "WANDB_KEY", "SGLANG_API_KEY", "CLAWGYM_RL_ROOT")}
    env["CLAWGYM_STATE_DIR"] = str(folder / "state")
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    conf_before = sorted(p.relative_to(ROOT) for p in (ROOT / "conf").rglob("*") if "__pycache__" not in p.parts)
    demo = subprocess.run([sys.executable, "-m", "clawgym", "demo"], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=400)
    conf_after = sorted(p.relative_to(ROOT) for p in (ROOT / "conf").rglob("*") if "__pycache__" not in p.parts)
    top_after = sorted(p.name for p in folder.iterdir())
    checkout = folder / "clawgym-demo" / "ClawGym-RL"
    saves = sorted(p for p in (checkout / "exp").iterdir() if p.is_dir()) if checkout.exists() else []
    return {"dir": folder, "env": env, "demo": demo, "checkout": checkout, "saves": saves,
            "conf_added": sorted(set(conf_after) - set(conf_before)), "top_after_demo": top_after}


def placeholders(work) -> Dict[str, str]:
    a, b = (str(s) for s in work["saves"][:2])
    return {"<save-a>": a, "<save-b>": b, "<save>": a, "/path/to/ClawGym-Agents/RL": str(work["checkout"])}


def argv_of(segment: str) -> List[str]:
    """A documented segment as this harness runs it (dry-run-safe)."""
    argv = shlex.split(segment)
    if argv[:2] == ["python", "train.py"]:
        argv = [sys.executable, str(ROOT / "train.py"), *argv[2:]]
        if not any(a.startswith(("dry_run=", "preflight_only=", "--cfg", "--info", "--help")) for a in argv):
            argv.append("dry_run=true")  # a launch command: its validation and plan, without GPUs
    elif argv[0] == "clawgym":
        argv = [sys.executable, "-m", "clawgym", *argv[1:]]
        if argv[3:4] == ["resume"] and "--dry-run" not in argv:
            argv.append("--dry-run")
    return argv


def run_documented(command: str, outcome: Outcome, work) -> subprocess.CompletedProcess:
    if command == "clawgym demo":
        return work["demo"]  # the fixture ran it, exactly as documented, in the same folder
    for name, value in placeholders(work).items():
        command = command.replace(name, value)
    env = dict(work["env"], CLAWGYM_RL_ROOT=str(work["checkout"]))  # the tour's export
    cwd = work["checkout"] if outcome.cwd == "checkout" else work["dir"]
    out, err, rc = [], [], 0
    for segment in command.split(" && "):
        if segment.strip() in ("pip install -e .", "pip install -e '.[test]'"):
            # Installed already: the interpreter running this test imports clawgym from this checkout.
            import clawgym
            assert Path(clawgym.__file__).resolve().is_relative_to(ROOT)
            continue
        proc = subprocess.run(argv_of(segment), cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
        out.append(proc.stdout)
        err.append(proc.stderr)
        rc = proc.returncode
        if rc:
            break
    return subprocess.CompletedProcess(command, rc, "".join(out), "".join(err))


def check(outcome: Outcome, proc: subprocess.CompletedProcess) -> None:
    text = proc.stdout + proc.stderr
    where = f"exit {proc.returncode}; output ends:\n{text[-3000:]}"
    if outcome.kind in ("accepted", "fits"):
        assert proc.returncode == 0, where
    if outcome.kind == "declined":
        assert proc.returncode == 2 and "Traceback" not in text, where
    if outcome.kind == "fits":
        # A single run's memory table ("GPU peak ... fits") and a sweep job's short block
        # ("memory:  GPU peak ... : fits").
        peaks = [line for line in text.splitlines()
                 if line.strip().startswith("GPU peak") or line.strip().startswith("memory:  ")]
        assert peaks and all(line.rstrip().endswith("fits") for line in peaks), where
    if outcome.kind == "does_not_fit":
        assert "DOES NOT FIT" in text and proc.returncode in (0, 2), where
    if outcome.kind == "refused":
        assert proc.returncode == 2 and f"[{outcome.texts[0]}]" in text and "invalid configuration" in text, where
        return
    if outcome.kind == "preflight_fails":
        assert proc.returncode != 0 and "preflight" in text.lower(), where
    for t in outcome.texts:
        assert t in text, f"{t!r} not in the output; {where}"


# ---------------------------------------------------------------- tests

def test_every_documented_command_is_run_or_says_why_not():
    missing, vague = [], []
    for d in documented():
        if d.not_run is not None:
            if len(d.not_run.split()) < 4:
                vague.append(f"{d.where}: {d.command} (# not run: {d.not_run})")
        elif d.command not in OUTCOMES:
            missing.append(f"{d.where}: {d.command}")
    assert not missing, ("documented commands no test runs (add each to OUTCOMES in tests/test_docs_commands.py, "
                         "or mark it '# not run: <reason>'; docs/contributing.md):\n  " + "\n  ".join(missing))
    assert not vague, "a not-run reason must say what is missing (4 words or more):\n  " + "\n  ".join(vague)


def test_every_outcome_is_of_a_command_the_docs_still_show():
    shown = {d.command for d in documented()}
    stale = [c for c in OUTCOMES if c not in shown]
    assert not stale, "OUTCOMES entries no page shows any more (remove or update them):\n  " + "\n  ".join(stale)


def test_extraction_reads_blocks_as_documented(tmp_path):
    # The rules the other tests rely on: continuation lines, trailing comments, console output, not-run marks.
    page = tmp_path / "p.md"
    page.write_text("```bash\npython train.py a=1 \\\n    b=2   # two keys\n# not run: needs a real cluster here\n"
                    "kubectl apply -f x\n```\n```console\n$ clawgym runs\nrun  status\n```\n```text\nclawgym no\n```\n")
    got = [(d.command, d.not_run) for d in extract(page)]
    assert got == [("python train.py a=1 b=2", None), ("kubectl apply -f x", "needs a real cluster here"),
                   ("clawgym runs", None)]


@pytest.mark.parametrize("command", [c for c, o in OUTCOMES.items() if o.kind == "covered_by"])
def test_command_covered_by_another_test_names_a_real_test(command):
    path, _, name = OUTCOMES[command].texts[0].partition("::")
    assert f"def {name}(" in (ROOT / path).read_text()


def test_test_command_is_what_ci_runs():
    command = next(c for c, o in OUTCOMES.items() if o.kind == "ci")
    last = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.strip()][-1]
    assert last == command


def test_export_points_at_the_demo_checkout(work):
    command = next(c for c, o in OUTCOMES.items() if o.kind == "env")
    name, _, value = command[len("export "):].partition("=")
    assert name == "CLAWGYM_RL_ROOT"
    assert Path(value.replace("$PWD", str(work["dir"]))) == work["checkout"]


def test_the_demo_writes_only_into_its_named_folder(work):
    """Issue 35: the demo left clawgym-demo/, report.html and conf/experiment/ in the checkout. The demo
    itself writes only into the folder it names (here ./clawgym-demo; `state` is this harness's
    CLAWGYM_STATE_DIR), and nothing into clawgym's conf/."""
    assert work["demo"].returncode == 0, work["demo"].stderr[-3000:]
    assert work["top_after_demo"] == ["clawgym-demo", "state"]
    assert work["conf_added"] == []


def _tour_commands():
    text = (ROOT / "README.md").read_text()
    tour = text.split("## A five-minute tour", 1)[1].split("\n## ", 1)[0]
    page = Path("tour.md")
    return [d.command for d in extract_text(tour, page)]


def test_the_readme_tour_writes_its_files_into_the_demo_folder():
    """Issue 35: the tour's `clawgym report ... --out report.html` wrote report.html into the cwd (the
    checkout, as the README has you run it): every file the tour asks for goes into clawgym-demo/, which
    `rm -r clawgym-demo` removes."""
    outs = []
    for command in _tour_commands():
        argv = shlex.split(command)
        outs += [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--out"]
    assert outs, "the tour writes a report"
    assert all(o.startswith("clawgym-demo/") for o in outs), outs


#: Guide pages whose own tests read the page and run every command it shows, with its outcome.
PAGE_TESTS = {
    "docs/guide/explain.md": lambda c: "tests/test_guide_explain.py::test_the_guides_command_does_what_it_says",
    "docs/guide/layouts.md": lambda c: ("tests/test_layout_search.py::"
                                        "test_every_command_of_the_layouts_guide_runs_with_its_documented_outcome"),
    "docs/guide/tuning.md": lambda c: (
        "tests/test_tuner_docs.py::test_train_commands_on_the_page_dry_run_the_study_they_show"
        if c.startswith("python train.py") else
        "tests/test_tuner_docs.py::test_every_clawgym_command_on_the_page_is_run_by_the_study_tests"),
}
for _d in documented():
    _page = _d.where.rsplit(":", 1)[0]
    if _page in PAGE_TESTS and _d.not_run is None:
        OUTCOMES.setdefault(_d.command, covered_by(PAGE_TESTS[_page](_d.command)))


RUN = [c for c, o in OUTCOMES.items() if o.kind not in ("covered_by", "ci", "env")]


@pytest.mark.parametrize("command", RUN, ids=[f"{i:02d}-{' '.join(c.split()[:3])}" for i, c in enumerate(RUN)])
def test_documented_command_does_what_the_docs_say(command, work):
    assert work["demo"].returncode == 0, work["demo"].stdout[-3000:] + work["demo"].stderr[-3000:]
    outcome = OUTCOMES[command]
    check(outcome, run_documented(command, outcome, work))
