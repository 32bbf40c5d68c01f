"""Body of the stand-ins ``clawgym import`` puts first on a launch script's PATH.

Run as ``python -S recorder.py TOOL ARGS...`` by the small wrappers that
:mod:`clawgym.importer.capture` writes (one per tool). It appends one JSON line
(tool, argv, cwd, environment) to ``$CLAWGYM_IMPORT_LOG`` and does nothing else, so
running a launch script kills no process, starts no Ray head and submits no job:
what the script *would* do is read back from the log. Standard library only, no
site-packages (``-S``): it runs once per command the script calls.

A few probes are answered as a slime node would answer them, so that a script under
``set -euo pipefail`` computes what it computes at home (the importer lists every answer
in its report):

* ``nvidia-smi -L`` / ``topo -m`` / ``--query-gpu``: ``$CLAWGYM_IMPORT_GPUS`` GPUs (the
  ``--gpus-per-node`` of ``clawgym import``), linked by NVLink unless ``$CLAWGYM_IMPORT_NVLINK`` is 0;
* ``pip list`` / ``pip freeze``: the packages of slime's image (the file ``$CLAWGYM_IMPORT_PIP_LIST``);
* ``mktemp``: a new empty file (or directory with ``-d``) under ``$CLAWGYM_IMPORT_SCRATCH``,
  so a file the script generates for the trainer (``--sglang-config``) can be read back.
"""

import json
import os
import shutil
import sys

#: Tools whose stdout the script pipes onward: the stand-in passes stdin through
#: (``exec > >(tee -a log)`` keeps printing, nothing is written).
PASS_THROUGH = {"tee"}


#: Interpreters whose inline programs (``python3 - <<PY``, ``python3 -c CODE``) compute a value
#: for the script (a runtime-env JSON); they run, isolated (-I). Anything else they would run
#: (``python3 convert.py``, ``python3 -m sglang.launch_server``) is recorded as a command not run.
INLINE = {"python", "python3"}

#: Runs an inline program under an audit hook that refuses every write, deletion, process and
#: network call: it may read and compute (json.dumps of os.environ), never change the machine.
GUARD = r"""
import sys
_DENY = ("os.remove", "os.rename", "os.mkdir", "os.rmdir", "os.chmod", "os.chown", "os.link", "os.symlink",
         "os.truncate", "os.utime", "shutil.rmtree", "shutil.copyfile", "shutil.move", "subprocess.Popen",
         "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "os.kill", "os.killpg",
         "socket.connect", "socket.bind", "socket.sendto", "pty.spawn", "ctypes.dlopen")
def _hook(event, args):
    if event == "open":
        mode, flags = (args[1] or "r"), (args[2] or 0)
        if isinstance(mode, str) and any(c in mode for c in "wax+") or flags & 0o3:
            raise PermissionError("clawgym import: an inline program may not write files")
    elif event in _DENY or event.startswith(("os.exec", "os.spawn")):
        raise PermissionError(f"clawgym import: an inline program may not call {event}")
sys.addaudithook(_hook)
_argv = sys.argv[1:]
if _argv[:1] == ["-c"]:
    _code, sys.argv = _argv[1], ["-c", *_argv[2:]]
else:
    _code, sys.argv = sys.stdin.read(), ["-", *_argv[1:]]
exec(compile(_code, "<inline>", "exec"), {"__name__": "__main__"})
"""


def main() -> int:
    tool, argv = sys.argv[1], sys.argv[2:]
    if tool in INLINE:
        if argv[:1] in (["-"], ["-c"]):
            record = {"tool": "python (inline)", "argv": [tool, *argv], "cwd": os.getcwd(), "env": {}, "answer": ""}
            with open(os.environ["CLAWGYM_IMPORT_LOG"], "a", encoding="utf-8") as log:
                log.write(json.dumps(record) + "\n")
            real = os.environ["CLAWGYM_IMPORT_PY"]
            os.execv(real, [real, "-I", "-c", GUARD, *argv])
        tool, argv = "<not found>", [tool, *argv]
    answer = ANSWERS.get(tool)
    text = answer(argv) if answer is not None else ""
    record = {"tool": tool, "argv": argv, "cwd": os.getcwd(), "env": dict(os.environ), "answer": text}
    if tool == "ray" and argv[:2] == ["job", "submit"]:
        record["files"] = _named_files(argv)
    # One append per call; the script calls its tools one after another.
    with open(os.environ["CLAWGYM_IMPORT_LOG"], "a", encoding="utf-8") as log:
        log.write(json.dumps(record) + "\n")
    if tool in PASS_THROUGH:
        shutil.copyfileobj(sys.stdin.buffer, sys.stdout.buffer)
    if text:
        sys.stdout.write(text)
        sys.stdout.flush()
    return 0


#: Largest file the submit's argv may name that is read back (an SGLang config is a few KB).
MAX_FILE_BYTES = 1_000_000


def _named_files(argv: list) -> dict:
    """Content of the files the job is given by path after the options ``$CLAWGYM_IMPORT_FILE_FLAGS``
    names (``--sglang-config PATH`` or ``--sglang-config=PATH``): read here, inside the jail, as the
    script's own processes see the machine (its views; ``~`` is the jail's HOME), so the importer never
    reads a path a script names with its own rights. A path the jail does not show is left out."""
    flags = [f for f in os.environ.get("CLAWGYM_IMPORT_FILE_FLAGS", "").split(",") if f]
    out = {}
    for i, tok in enumerate(argv):
        opt, eq, value = tok.partition("=")
        if eq and opt in flags:
            path = value
        elif tok in flags and i + 1 < len(argv):
            path = argv[i + 1]
        else:
            continue
        full = os.path.expanduser(path)
        try:
            # One open, no following a link planted at the last component, a regular file only.
            fd = os.open(full, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
            with os.fdopen(fd, "rb") as fh:
                import stat

                st = os.fstat(fh.fileno())
                if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE_BYTES:
                    continue
                out[path] = fh.read(MAX_FILE_BYTES).decode("utf-8", errors="replace")
        except OSError:
            continue
    return out


def _gpus() -> int:
    try:
        return max(0, int(os.environ.get("CLAWGYM_IMPORT_GPUS", "8")))
    except ValueError:
        return 8


def _nvidia_smi(argv: list) -> str:
    n = _gpus()
    name = os.environ.get("CLAWGYM_IMPORT_GPU_NAME", "NVIDIA H100 80GB HBM3")
    if argv[:1] == ["-L"]:
        return "".join(f"GPU {i}: {name} (UUID: GPU-00000000-0000-0000-0000-{i:012d})\n" for i in range(n))
    if argv[:1] == ["topo"]:
        link = "NV18" if os.environ.get("CLAWGYM_IMPORT_NVLINK", "1") != "0" else "SYS"
        head = "\t" + "\t".join(f"GPU{i}" for i in range(n)) + "\n"
        rows = "".join(f"GPU{i}\t" + "\t".join("X" if i == j else link for j in range(n)) + "\n"
                       for i in range(n))
        return head + rows
    query = next((a.split("=", 1)[1] for a in argv if a.startswith("--query-gpu=")), None)
    if query is not None:
        fields = {"index": lambda i: str(i), "name": lambda i: name, "count": lambda i: str(n),
                  "memory.total": lambda i: "81559 MiB", "memory.used": lambda i: "0 MiB",
                  "uuid": lambda i: f"GPU-00000000-0000-0000-0000-{i:012d}"}
        cols = [q.strip() for q in query.split(",")]
        return "".join(", ".join(fields.get(c, lambda i: "[N/A]")(i) for c in cols) + "\n" for i in range(n))
    return ""


def _pip(argv: list) -> str:
    if argv[:1] not in (["list"], ["freeze"]):
        return ""
    path = os.environ.get("CLAWGYM_IMPORT_PIP_LIST", "")
    try:
        with open(path, encoding="utf-8") as fh:
            packages = json.load(fh)["packages"]
    except (OSError, ValueError, KeyError):
        return ""
    if argv[:1] == ["freeze"]:
        return "".join(f"{p['name']}=={p['version']}\n" for p in packages)
    lines = ["Package Version Editable project location", "------- ------- -------------------------"]
    lines += [" ".join(x for x in (p["name"], p["version"], p.get("location") or "") if x) for p in packages]
    return "\n".join(lines) + "\n"


def _mktemp(argv: list) -> str:
    import tempfile

    scratch = os.environ.get("CLAWGYM_IMPORT_SCRATCH") or tempfile.gettempdir()
    directory = any(a in ("-d", "--directory") for a in argv)
    template = next((a for a in argv if not a.startswith("-")), "tmp.XXXXXXXXXX")
    base = os.path.basename(template)
    stem = base.rstrip("X")
    suffix = ""
    if "X" in base and not base.endswith("X"):
        # mktemp --suffix style templates: name_XXXXXX.yaml
        cut = base.rfind("X") + 1
        stem, suffix = base[:cut].rstrip("X"), base[cut:]
    os.makedirs(scratch, exist_ok=True)
    if directory:
        return tempfile.mkdtemp(prefix=stem, suffix=suffix, dir=scratch) + "\n"
    fd, path = tempfile.mkstemp(prefix=stem, suffix=suffix, dir=scratch)
    os.close(fd)
    return path + "\n"


#: date options that read a given time, not the clock: answered by the real date as they are.
_NOT_THE_CLOCK = ("-d", "--date", "-r", "--reference", "-f", "--file", "-s", "--set")


def _date(argv: list) -> str:
    """The real ``date``, reading the instant ``$CLAWGYM_IMPORT_EPOCH`` instead of the clock (the import
    runs the script at two instants to see which values come from the clock)."""
    import subprocess

    real = os.environ.get("CLAWGYM_IMPORT_DATE") or "date"
    given = any(a in _NOT_THE_CLOCK or a.startswith(tuple(o + "=" for o in _NOT_THE_CLOCK if o.startswith("--")))
                or (a.startswith(("-d", "-r", "-f", "-s")) and not a.startswith("--")) for a in argv)
    epoch = os.environ.get("CLAWGYM_IMPORT_EPOCH")
    cmd = [real, *argv] if given or not epoch else [real, f"--date=@{epoch}", *argv]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


ANSWERS = {"nvidia-smi": _nvidia_smi, "pip": _pip, "pip3": _pip, "mktemp": _mktemp, "date": _date}


if __name__ == "__main__":
    sys.exit(main())
