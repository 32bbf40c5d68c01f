"""Run a launch script for real, with stand-ins, and read back what it would submit.

The script runs under bash inside the import's jail (:mod:`clawgym.importer.sandbox`:
own namespaces, no capabilities, read-only views of the machine and the repository), in
a temporary directory laid out like its repository
(the directories on the way to the script are real, everything else is a symlink
into the repository, so ``${SCRIPT_DIR}/models/x.sh`` or ``${SCRIPT_DIR}/slime``
resolve as they would at home). Its PATH holds only:

* stand-ins (:data:`STANDINS`) that record their argv, cwd and environment through
  :mod:`clawgym.importer.recorder` and do nothing: ``ray`` (``ray job submit`` is the
  launch we are after; ``ray start/stop/status`` start and stop nothing), ``pkill``,
  ``sleep``, ``nvidia-smi`` (answers: no GPU, no NVLink), ``docker``, file writers...
* a few harmless tools (:data:`HARMLESS_TOOLS`) the scripts compute with (grep, sed, seq...).

``kill`` (a bash builtin) is shadowed by a recording function, and a command found
nowhere is recorded by bash's ``command_not_found_handle`` (``python3 convert.py``,
``torchrun ...``) and reported by name, never run. ``source``/``.`` are wrapped to
record which files the script sources and to take ``scripts/models/*.sh`` from the
user's slime checkout (``--slime-root``).

Every temporary path in what was recorded is mapped back to the repository (and the jail's
HOME to the user's), so the captured argv names the user's real files; the report names
files written in HOME or /tmp as the script did (``~/x``, ``/tmp/x``), and writes the jail
refused (read-only views) from the script's own error lines.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from clawgym.common import secrets
from clawgym.importer import sandbox

RECORDER = Path(__file__).resolve().parent / "recorder.py"

#: Tools shadowed by a recording stand-in, and why. None of them does anything.
STANDINS: Dict[str, str] = {
    "ray": "ray start/stop/status and ray job submit: the launch we capture; nothing is started or stopped",
    "pkill": "process cleanup (clawgym stops only what it started)",
    "pgrep": "process lookup before cleanup",
    "killall": "process cleanup",
    "sleep": "waits after cleanup",
    "nvidia-smi": "GPU/NVLink probes: answered as a node of --gpus-per-node GPUs with NVLink",
    "date": "the clock: the real date, answered at the instant the import gives each run of the script (two "
            "runs at different instants show which values the script makes from the clock)",
    "docker": "container cleanup",
    "lsof": "port lookup before cleanup",
    "fuser": "port lookup before cleanup",
    "ps": "process lookup",
    "tee": "log mirroring (passes its input through, writes nothing)",
    "mkdir": "creates directories",
    "cp": "writes files",
    "mv": "writes files",
    "rm": "deletes files",
    "ln": "writes links",
    "touch": "writes files",
    "chmod": "changes files",
    "ssh": "runs commands on other nodes",
    "pdsh": "runs commands on other nodes",
    "scp": "copies files to other nodes",
    "rsync": "copies files",
    "wget": "downloads",
    "curl": "network calls",
    "hf": "downloads",
    "huggingface-cli": "downloads",
    "git": "changes checkouts",
    "pip": "installs packages (`pip list` answers with the packages of slime's image)",
    "pip3": "installs packages (`pip list` answers with the packages of slime's image)",
    "mktemp": "makes a temporary file (answered with a new empty file the importer reads back)",
    "nohup": "starts background processes",
    "timeout": "runs commands",
    "sudo": "runs commands as root",
    "python3": "inline programs (python3 - <<PY, -c) compute values and run isolated; anything else is recorded, not run",
    "python": "as python3",
}

#: Real tools launch scripts compute with; nothing else from the machine is on PATH.
HARMLESS_TOOLS = (
    "awk", "basename", "bc", "cat", "cut", "dirname", "env", "expr", "false", "grep", "egrep",
    "head", "hostname", "id", "ls", "nproc", "numfmt", "paste", "printf", "pwd", "readlink", "realpath",
    "sed", "seq", "sort", "tail", "tr", "true", "uname", "uniq", "wc", "whoami", "xargs",
)

#: The instant the clock reads in a run of the script (``date`` stand-in; seconds since the epoch):
#: the second run reads 400 days, 1 hour, 1 minute and 1 second later, so every field a format can
#: print (year, month, day, hour, minute, second) differs between the two.
CLOCK_EPOCHS = (1_800_000_000, 1_800_000_000 + 400 * 86400 + 3661)


#: Variables bash itself sets for its children; never something a script exports.
SHELL_OWN = {"_", "SHLVL", "PWD", "OLDPWD"}
#: Variables the importer gives every run (PATH of stand-ins, the log...).
IMPORTER_OWN = ("CLAWGYM_IMPORT_",)

# Bash functions exported to the script (``BASH_FUNC_<name>%%``): they shadow builtins.
_RECORD = '"$CLAWGYM_IMPORT_PY" -S "$CLAWGYM_IMPORT_RECORDER"'
_SOURCE_FN = (
    "() { local __cg_f=\"$1\"; shift; "
    "if [ -n \"$CLAWGYM_IMPORT_MODELS\" ] && [[ \"${__cg_f%/*}\" == *models ]] "
    "&& [ -f \"$CLAWGYM_IMPORT_MODELS/${__cg_f##*/}\" ] "
    "&& { [ -n \"$CLAWGYM_IMPORT_MODELS_FORCE\" ] || [ ! -f \"$__cg_f\" ]; }; "
    "then __cg_f=\"$CLAWGYM_IMPORT_MODELS/${__cg_f##*/}\"; fi; "
    f"{_RECORD} source \"$__cg_f\"; "
    "builtin source \"$__cg_f\" \"$@\"; }"
)
_KILL_FN = f"() {{ {_RECORD} kill \"$@\"; }}"
_NOT_FOUND_FN = f"() {{ {_RECORD} '<not found>' \"$@\"; return 0; }}"


class CaptureError(Exception):
    """The script could not be run at all (missing file, no bash)."""


@dataclass
class Call:
    """One command the script ran through a stand-in (or that bash did not find)."""

    tool: str
    argv: List[str]
    cwd: str
    env: Dict[str, str]
    # What the stand-in printed (probes answered as a slime node would), "" for most.
    answer: str = ""

    @property
    def line(self) -> str:
        return " ".join([self.tool, *self.argv]) if self.tool not in ("<not found>", "python (inline)") \
            else " ".join(self.argv)


def split_options(tokens: Sequence[str], valued: Sequence[str]) -> Tuple[Dict[str, Any], List[str]]:
    """``--opt value`` / ``--opt=value`` / ``--switch`` tokens of a CLI; the last value wins.

    ``valued`` lists the options that take a value; returns (options, leftover tokens).
    """
    opts: Dict[str, Any] = {}
    rest: List[str] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.startswith("--") and "=" in tok:
            key, value = tok.split("=", 1)
            opts[key] = value
        elif tok in valued and i + 1 < len(tokens):
            opts[tok] = tokens[i + 1]
            i += 1
        elif tok.startswith("-"):
            opts[tok] = True
        else:
            rest.append(tok)
        i += 1
    return opts, rest


#: ``ray job submit`` options that take a value (Ray's CLI).
SUBMIT_VALUED = ("--address", "--runtime-env-json", "--runtime-env", "--working-dir", "--submission-id",
                 "--job-id", "--entrypoint-num-cpus", "--entrypoint-num-gpus", "--entrypoint-memory",
                 "--entrypoint-resources", "--metadata-json", "--log-style", "--log-color", "--headers")
#: ``ray start`` options that take a value.
START_VALUED = ("--address", "--node-ip-address", "--port", "--num-gpus", "--num-cpus", "--dashboard-host",
                "--dashboard-port", "--resources", "--temp-dir", "--ray-client-server-port", "--object-store-memory",
                "--node-manager-port", "--object-manager-port", "--min-worker-port", "--max-worker-port")


#: Interpreters a Ray entrypoint may run the trainer with.
INTERPRETERS = ("python", "python3")


@dataclass
class Submit:
    """One ``ray job submit`` the script ran."""

    call: Call
    options: Dict[str, Any]
    entrypoint: List[str]

    @property
    def runtime_env(self) -> Dict[str, Any]:
        raw = self.options.get("--runtime-env-json")
        return json.loads(raw) if isinstance(raw, str) and raw.strip() else {}

    @property
    def env_vars(self) -> Dict[str, str]:
        return {str(k): str(v) for k, v in (self.runtime_env.get("env_vars") or {}).items()}

    @property
    def trainer_entry(self) -> Optional[Tuple[str, List[str], str, List[str]]]:
        """(interpreter, interpreter options, trainer script, trainer argv) of a
        ``python3 [-u ...] <script>.py FLAGS`` entrypoint; None for anything else."""
        entry = self.entrypoint
        if not entry or os.path.basename(entry[0]) not in INTERPRETERS:
            return None
        i, opts = 1, []
        while i < len(entry) and entry[i].startswith("-"):
            opts.append(entry[i])
            # Options that take a value as the next token (python -X dev, -W error).
            if entry[i] in ("-X", "-W") and i + 1 < len(entry):
                opts.append(entry[i + 1])
                i += 1
            i += 1
        if i >= len(entry) or not entry[i].endswith(".py"):
            return None
        return entry[0], opts, entry[i], list(entry[i + 1:])

    @property
    def working_dir(self) -> str:
        """``--working-dir``, else the directory the script submitted from."""
        wd = self.options.get("--working-dir") or self.runtime_env.get("working_dir")
        return str(wd) if wd else self.call.cwd


@dataclass
class Capture:
    """What a launch script did, with temporary paths mapped back to the repository."""

    script: Path
    repo_root: Path
    slime_root: Path
    given_env: Dict[str, str]
    returncode: int
    output: str
    calls: List[Call] = field(default_factory=list)
    # Files created or changed inside the temporary layout (relative to the repository).
    written: List[str] = field(default_factory=list)
    # Files or links of the layout the script removed (relative to the repository).
    deleted: List[str] = field(default_factory=list)
    # The --timeout the script ran past (seconds), None when it ended by itself.
    timed_out: Optional[float] = None
    # Files written in its HOME or /tmp, as the script named them (~/x, /tmp/x).
    written_elsewhere: List[str] = field(default_factory=list)
    # Lines of the call log that were not the recorder's (the script wrote to the log itself).
    forged_log_lines: int = 0
    # Output lines where the jail refused a write (the repository and the system are read-only).
    refused_writes: List[str] = field(default_factory=list)
    # Content of the files the job's argv names that the script generated (mktemp, heredocs):
    # path as the argv names it -> text. They vanish with the temporary layout.
    generated: Dict[str, str] = field(default_factory=dict)
    # The instant the script's clock read (CLOCK_EPOCHS).
    epoch: int = CLOCK_EPOCHS[0]
    # How probes were answered (GPUs per node, NVLink), for the report.
    gpus_per_node: int = 8
    nvlink: bool = True

    def calls_of(self, tool: str) -> List[Call]:
        return [c for c in self.calls if c.tool == tool]

    @property
    def submits(self) -> List[Submit]:
        out = []
        for c in self.calls_of("ray"):
            if c.argv[:2] == ["job", "submit"]:
                tokens = c.argv[2:]
                if "--" in tokens:
                    cut = tokens.index("--")
                    opts, _ = split_options(tokens[:cut], SUBMIT_VALUED)
                    entry = tokens[cut + 1:]
                else:
                    opts, entry = split_options(tokens, SUBMIT_VALUED)
                out.append(Submit(c, opts, list(entry)))
        return out

    @property
    def head_starts(self) -> List[Call]:
        return [c for c in self.calls_of("ray") if c.argv[:1] == ["start"] and "--head" in c.argv]

    def head_options(self) -> Dict[str, Any]:
        if not self.head_starts:
            return {}
        return split_options(self.head_starts[-1].argv[1:], START_VALUED)[0]

    @property
    def sourced(self) -> List[str]:
        return [c.argv[0] for c in self.calls_of("source") if c.argv]

    @property
    def model_files(self) -> List[str]:
        """Model files (``.../models/<name>.sh``) the script sourced, in order."""
        return [p for p in self.sourced if Path(p).parent.name == "models"]

    def exported(self, env: Mapping[str, str]) -> Dict[str, str]:
        """Variables of ``env`` that the script set (not given to it, or given with another value)."""
        return {k: v for k, v in env.items()
                if k not in SHELL_OWN and not k.startswith(IMPORTER_OWN)
                and (k not in self.given_env or self.given_env[k] != v)}

    def job_env(self, submit: Submit) -> Dict[str, str]:
        """Environment the job sees: what the script exported before starting its local head
        (the head's processes and the job inherit it), overlaid with the runtime env."""
        head = self.exported(self.head_starts[-1].env) if self.head_starts else {}
        return {**head, **submit.env_vars}


def _git_toplevel(path: Path) -> Optional[Path]:
    git = shutil.which("git")
    if not git:
        return None
    try:
        out = subprocess.run([git, "-C", str(path), "rev-parse", "--show-toplevel"], capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return Path(out.stdout.strip()).resolve() if out.returncode == 0 and out.stdout.strip() else None


def repository_of(script: Path, slime_root: Optional[Path]) -> Path:
    """The repository a script belongs to: its git toplevel; else the slime root when the
    script lies inside it; else the nearest folder above it that holds ``scripts/models/``
    (a slime checkout); else the script's own directory."""
    top = _git_toplevel(script.parent)
    if top is not None:
        return top
    if slime_root is not None and _inside(script, slime_root):
        return slime_root
    for folder in script.parents:
        if (folder / "scripts" / "models").is_dir():
            return folder
    return script.parent


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def _mirror(repo: Path, script: Path, tmp_root: Path) -> Path:
    """Lay out ``tmp_root`` like ``repo``: real directories down to the script's, the
    script copied, everything else a symlink to the repository. Returns the copy."""
    rel = script.parent.resolve().relative_to(repo)
    here_real, here_tmp = repo, tmp_root
    chain = list(rel.parts)
    while True:
        here_tmp.mkdir(parents=True, exist_ok=True)
        nxt = chain[0] if chain else None
        for entry in sorted(here_real.iterdir()):
            if entry.name in (nxt, ".git") or (not chain and entry.name == script.name):
                continue
            (here_tmp / entry.name).symlink_to(entry)
        if not chain:
            break
        here_real, here_tmp = here_real / nxt, here_tmp / nxt
        chain.pop(0)
    copy = here_tmp / script.name
    shutil.copyfile(script, copy)
    copy.chmod(copy.stat().st_mode | stat.S_IXUSR)
    return copy


def _tree_state(root: Path) -> Dict[str, Tuple[int, int]]:
    """What the checkout mirror holds: its files and symlinks (``sandbox.tree_state``)."""
    return sandbox.tree_state(root, links=True)


def _write_standins(bindir: Path) -> None:
    bindir.mkdir()
    for tool in STANDINS:
        wrapper = bindir / tool
        wrapper.write_text(
            "#!/bin/sh\n"
            f"# clawgym import stand-in for `{tool}`: records the call, runs nothing.\n"
            f'exec "$CLAWGYM_IMPORT_PY" -S "$CLAWGYM_IMPORT_RECORDER" {tool} "$@"\n'
        )
        wrapper.chmod(0o755)


def _link_tools(bindir: Path) -> None:
    bindir.mkdir()
    for name in HARMLESS_TOOLS:
        real = shutil.which(name)
        if real:
            (bindir / name).symlink_to(real)


def _map_back(value: Any, mapping: Sequence[Tuple[str, str]]) -> Any:
    if isinstance(value, str):
        return sandbox.map_paths(value, mapping)
    if isinstance(value, list):
        return [_map_back(v, mapping) for v in value]
    if isinstance(value, dict):
        return {k: _map_back(v, mapping) for k, v in value.items()}
    return value


#: Seconds a script may run before the jail is killed (``clawgym import --timeout``).
DEFAULT_TIMEOUT = 120.0
#: The packages slime's image has (what the ``pip list`` stand-in answers).
PIP_LIST = Path(__file__).resolve().parent / "data" / "slime_image_packages.json"


def run_script(script: Path, *, slime_root: Optional[Path] = None, env: Optional[Mapping[str, str]] = None,
               timeout: float = DEFAULT_TIMEOUT, gpus_per_node: int = 8, nvlink: bool = True,
               epoch: int = CLOCK_EPOCHS[0]) -> Capture:
    """Run ``script`` with stand-ins, in the import's jail, and return what it did.

    Raises :class:`CaptureError` when no jail can be made (the script is then not run).

    ``env`` is the environment the script sees besides PATH/HOME (default: nothing, so
    the script's own defaults apply). ``slime_root`` is the slime checkout whose
    ``scripts/models/`` the script sources (default: the script's repository).
    """
    script = Path(script)
    if not script.is_file():
        raise CaptureError(f"launch script {script} not found")
    script = script.resolve()
    bash = shutil.which("bash")
    if not bash:
        raise CaptureError("bash is needed to run a launch script and is not on PATH")
    explicit_slime = slime_root is not None
    slime = Path(slime_root).resolve() if slime_root is not None else None
    repo = repository_of(script, slime)
    slime = slime or repo
    models = slime / "scripts" / "models"

    env = {str(k): str(v) for k, v in (env or {}).items()}
    with _refusals():
        sandbox.check_env(env)
        jail = sandbox.Jail()
    # Secret values the user gave are masked in every report from here on.
    secrets.remember(secrets.named_secrets(env).values())
    with jail, _refusals():
        tmp_path = jail.dir
        root = tmp_path / "checkout"
        copy = _mirror(repo, script, root)
        _write_standins(tmp_path / "standins")
        _link_tools(tmp_path / "tools")
        # The script reads its checkout and models, runs the recorder; it changes none of them.
        for path in (repo, slime, RECORDER, PIP_LIST):
            jail.readonly(path)
        jail.readonly_inside(tmp_path / "standins")
        jail.readonly_inside(tmp_path / "tools")
        log = tmp_path / "calls.jsonl"
        log.touch()
        # Scripts are run from their slime checkout (`bash scripts/run-x.sh`), or from their own folder.
        cwd = root / slime.relative_to(repo) if _inside(slime, repo) else copy.parent
        given = {
            "PATH": f"{tmp_path / 'standins'}:{tmp_path / 'tools'}",
            "HOME": str(jail.home),
            "LANG": "C.UTF-8",
            **env,
        }
        run_env = {
            **given,
            "CLAWGYM_IMPORT_LOG": str(log),
            "CLAWGYM_IMPORT_PY": sandbox.interpreter(),
            "CLAWGYM_IMPORT_RECORDER": str(RECORDER),
            "CLAWGYM_IMPORT_MODELS": str(models) if models.is_dir() else "",
            "CLAWGYM_IMPORT_MODELS_FORCE": "1" if explicit_slime else "",
            "CLAWGYM_IMPORT_GPUS": str(gpus_per_node),
            "CLAWGYM_IMPORT_NVLINK": "1" if nvlink else "0",
            "CLAWGYM_IMPORT_PIP_LIST": str(PIP_LIST),
            "CLAWGYM_IMPORT_SCRATCH": str(tmp_path / "scratch"),
            # The clock the `date` stand-in reads: the real date binary, at this run's instant.
            "CLAWGYM_IMPORT_EPOCH": str(int(epoch)),
            "CLAWGYM_IMPORT_DATE": os.path.realpath(shutil.which("date") or "/bin/date"),
            # The options whose value is a file the job reads (--sglang-config): read in the jail.
            "CLAWGYM_IMPORT_FILE_FLAGS": ",".join(file_flags()),
            "BASH_FUNC_source%%": _SOURCE_FN,
            "BASH_FUNC_.%%": _SOURCE_FN,
            "BASH_FUNC_kill%%": _KILL_FN,
            "BASH_FUNC_command_not_found_handle%%": _NOT_FOUND_FN,
        }
        before = _tree_state(root)
        jail.snapshot()
        outcome = jail.run([bash, str(copy)], env=run_env, cwd=cwd, timeout=timeout)
        after = _tree_state(root)
        written = sorted(p for p, st in after.items() if before.get(p) != st)
        deleted = sorted(p for p in before if p not in after)
        calls, bad_lines = sandbox.read_log(log)
        # Jail paths back to what the script named: the mirror is the repository; HOME is the
        # user's home for what the job would see, ``~`` in what the report prints.
        real_home = os.path.expanduser("~")
        to_real = [(str(root), str(repo)), (str(jail.home), real_home)]
        to_shown = [(str(root), str(repo)), (str(jail.home), "~")]
        output = sandbox.map_paths(outcome.output, to_shown)
        capture = Capture(
            script=script, repo_root=repo, slime_root=slime,
            given_env={k: sandbox.map_paths(v, to_real) for k, v in given.items()},
            returncode=outcome.returncode, output=output, written=written, deleted=deleted,
            timed_out=outcome.timed_out,
            written_elsewhere=jail.written(), refused_writes=sandbox.refused_writes(output),
            forged_log_lines=bad_lines, gpus_per_node=gpus_per_node, nvlink=nvlink, epoch=int(epoch),
        )
        for c in calls:
            # Files the job is given by path, as the recorder read them inside the jail (never read here:
            # a path the script names is read with the jail's views, or not at all).
            files = c.pop("files", None) if isinstance(c, dict) else None
            if isinstance(files, dict):
                for path, text in files.items():
                    capture.generated.setdefault(str(path), str(text))
            c = _map_back(c, to_real)
            c["env"] = {k: v for k, v in c["env"].items() if not k.startswith(("BASH_FUNC_",) + IMPORTER_OWN)}
            capture.calls.append(Call(c["tool"], c["argv"], c["cwd"], c["env"], c.get("answer") or ""))
        capture.generated = {_map_back(k, to_real): v for k, v in capture.generated.items()}
        _remember_secrets(capture)
        return capture


def file_flags() -> List[str]:
    """Trainer options whose value is a file the job reads (``flagmap`` rows of kind ``file``)."""
    from clawgym.trainer.flagmap import ROWS

    return sorted({r.flag for r in ROWS if r.kind == "file"})


@contextlib.contextmanager
def _refusals() -> Iterator[None]:
    """The jail's refusals (no sandbox here, a reserved --env name, a shared folder as the
    repository) as the capture's own error: the script was not run."""
    try:
        yield
    except sandbox.SandboxError as exc:
        raise CaptureError(str(exc)) from None


def _remember_secrets(capture: Capture) -> None:
    """Mask, in every report, the values of secret-named variables the script set or passed on,
    and values it gives to secret flags."""
    for c in capture.calls:
        secrets.remember(secrets.named_secrets(c.env).values())
    for sub in capture.submits:
        secrets.remember(secrets.argv_secrets(sub.entrypoint))
        try:
            env_vars = sub.env_vars
        except (ValueError, AttributeError):  # a runtime env that is not JSON: the import names it later
            continue
        secrets.remember(secrets.named_secrets(env_vars).values())


#: How the report names what a recorded command was.
CLEANUP_TOOLS = {"pkill", "pgrep", "killall", "kill", "sleep", "lsof", "fuser", "ps"}
#: Probes answered as a slime node would (the answer is listed in the report).
PROBE_TOOLS = {"nvidia-smi", "mktemp", "date"}
#: Commands that prepare the machine before the launch (installs, downloads, conversions,
#: directories, copies): a prerequisite the experiment lists, not part of the run.
SETUP_TOOLS = {"pip", "pip3", "hf", "huggingface-cli", "wget", "git", "mkdir", "cp", "mv", "rm", "ln", "touch",
               "chmod", "rsync"}
#: Commands that run elsewhere or start what the run would not own: never expressible.
ELSEWHERE_TOOLS = {"ssh", "pdsh", "scp", "sudo", "nohup", "timeout"}


def sglang_server(call: Call) -> bool:
    """A background SGLang server the script starts itself (an OPD teacher)."""
    argv = call.argv if call.tool == "<not found>" else []
    return len(argv) >= 3 and os.path.basename(argv[0]) in INTERPRETERS and argv[1] == "-m" \
        and argv[2] in ("sglang.launch_server", "sglang.srt.server")


def answer_summary(call: Call) -> str:
    """One line saying what a stand-in answered."""
    text = call.answer.strip()
    if not text:
        return "nothing"
    lines = text.splitlines()
    return lines[0] if len(lines) == 1 else f"{len(lines)} lines, first: {lines[0].strip()!r}"


def classify(capture: Capture, allowed_write_dirs: Sequence[str] = ()) -> List[Tuple[str, str]]:
    """What the script did besides submitting one job, as (kind, text) rows.

    kind is ``ignored`` (cleanup clawgym replaces by its own ownership of what it starts),
    ``answered`` (a probe and the stand-in's answer), ``setup`` (prepares the machine:
    installs, downloads, conversions, directories; listed as a prerequisite), ``service``
    (a server the script starts and waits for, e.g. an OPD teacher; becomes a run-side
    service when it can be expressed) or ``inexpressible`` (runs elsewhere, or another Ray
    command).
    """
    rows: List[Tuple[str, str]] = []
    home = os.path.expanduser("~").rstrip("/")

    def shown(text: str) -> str:
        # The script's HOME is a folder of the import; the report names it as the script did.
        return text.replace(home + "/", "~/") if home else text

    def allowed(path: str) -> bool:
        return any(os.path.normpath(path).startswith(os.path.normpath(d)) for d in allowed_write_dirs if d)

    servers = [c for c in capture.calls if sglang_server(c)]
    ports = {str(_server_port(c)) for c in servers}
    for c in capture.calls:
        if c.tool == "source":
            continue
        if c.tool == "ray":
            sub = c.argv[:2]
            if sub == ["job", "submit"] or (c.argv[:1] == ["start"] and "--head" in c.argv):
                continue
            if c.argv[:1] in (["stop"], ["status"]) or sub in (["job", "status"], ["job", "logs"], ["job", "list"]):
                rows.append(("ignored", f"`{c.line}` (clawgym stops only the head it started)"))
            else:
                rows.append(("inexpressible", f"`{c.line}`: only `ray start --head` and one `ray job submit` "
                                              "are understood (join an existing cluster with ray.address)"))
        elif c.tool in CLEANUP_TOOLS:
            rows.append(("ignored", f"`{c.line}`"))
        elif c.tool in PROBE_TOOLS or (c.tool in ("pip", "pip3") and c.argv[:1] in (["list"], ["freeze"])):
            rows.append(("answered", f"`{c.line}` -> {answer_summary(c)}"))
        elif c.tool == "docker" and c.argv[:1] in (["rm"], ["ps"], ["kill"], ["stop"]):
            rows.append(("ignored", f"`{c.line}` (clawgym removes its own leftover containers)"))
        elif c.tool == "tee" or (c.tool == "mkdir" and all(allowed(a) for a in c.argv if not a.startswith("-"))):
            rows.append(("ignored", f"`{c.line}` (clawgym writes the job's log under <save>/logs itself)"))
        elif c.tool == "python (inline)":
            rows.append(("answered", f"`{c.line.splitlines()[0][:80]}`: an inline program, run isolated to compute "
                                     "a value"))
        elif sglang_server(c):
            rows.append(("service", f"`{c.line}`: a server the script starts before the job"))
        elif c.tool == "curl" and any(f":{p}/" in a for a in c.argv for p in ports):
            rows.append(("service", f"`{c.line}`: waits for / asks that server"))
        elif c.tool in SETUP_TOOLS:
            rows.append(("setup", f"`{c.line}`: {STANDINS.get(c.tool, c.tool)} (not run)"))
        elif c.tool == "<not found>":
            rows.append(("setup", f"`{c.line}`: a command other than ray (not run)"))
        else:
            rows.append(("inexpressible", shown(f"`{c.line}`: {STANDINS.get(c.tool, 'a command other than ray')} "
                                                "(not run)")))
    for path in capture.written:
        target = str(capture.repo_root / path)
        if not allowed(target):
            rows.append(("setup", f"the script writes {target} (not written)"))
    for path in capture.deleted:
        rows.append(("inexpressible", f"the script deletes {capture.repo_root / path} (an experiment cannot "
                                      "delete files)"))
    for named in capture.written_elsewhere:
        # A log or scratch file in HOME or /tmp: listed with the setup steps (the launch itself is
        # still reproduced), as the script named it.
        rows.append(("setup", f"the script writes {named} (a file an experiment cannot create)"))
    if capture.forged_log_lines:
        rows.append(("inexpressible", f"the script wrote {capture.forged_log_lines} line(s) into the importer's "
                                      "call log that the stand-ins did not (the capture cannot be trusted)"))
    for line in capture.refused_writes:
        rows.append(("inexpressible", f"the script writes outside its folders, refused by the import's "
                                      f"read-only view: {line}"))
    # The script's HOME is a folder of the import: every row names it as the script did.
    return [(kind, shown(text)) for kind, text in rows]


def _server_port(call: Call) -> Optional[str]:
    opts, _ = split_options(call.argv[3:], ("--port", "--host", "--model-path", "--tp", "--tp-size"))
    port = opts.get("--port")
    return str(port) if port not in (None, True) else "30000"


def clock_values(first: "Capture", second: "Capture") -> List[Tuple[str, str]]:
    """(what the clock printed in ``first``, the ``${now:FORMAT}`` it is) for each ``date +FORMAT`` of
    the script whose answer reached the job (its argv or environment) and changed with the instant:
    the two runs differ there exactly where the two answers do. A value that differs otherwise (e.g.
    ``$RANDOM``) is not listed."""
    def dates(cap: "Capture") -> List[Tuple[List[str], str]]:
        return [(c.argv, c.answer.strip()) for c in cap.calls if c.tool == "date"]

    d1, d2 = dates(first), dates(second)
    if len(d1) != len(d2) or not first.submits or len(first.submits) != len(second.submits):
        return []
    s1, s2 = first.submits[-1], second.submits[-1]
    values1 = [*s1.entrypoint, *first.job_env(s1).values()]
    values2 = [*s2.entrypoint, *second.job_env(s2).values()]
    if len(values1) != len(values2):
        return []
    found: List[Tuple[str, str]] = []
    for (argv, a1), (_argv2, a2) in zip(d1, d2):
        fmt = next((a[1:] for a in argv if a.startswith("+")), None)
        # Only the clock read as is (no -d/--date/-r/-u: ${now:} is the launcher's local time), with a format
        # that strftime knows, and an answer distinctive enough to find.
        if fmt is None or any(a.startswith("-") for a in argv) or a1 == a2 or len(a1) < 4 or "%N" in fmt:
            continue
        marker = "\0clock\0"
        if any(a1 in v1 and v1 != v2 and v1.replace(a1, marker) == v2.replace(a2, marker)
               for v1, v2 in zip(values1, values2)):
            found.append((a1, "${now:" + fmt + "}"))
    return found
