"""The jail ``clawgym import`` runs a launch script in: make it, run the script, collect, tear down.

A launch script is untrusted shell. Stand-ins on its PATH only cover the commands it
names politely; ``/bin/rm``, ``awk 'BEGIN{system(...)}'``, ``builtin kill`` or a redirect
run for real. So the script runs under bubblewrap (``bwrap``, Debian package
``bubblewrap``), and every guarantee below comes from the kernel, not from the stand-ins:

* new user, PID, network, UTS, IPC (and cgroup, where the kernel allows it) namespaces;
  every capability dropped; no further user namespaces inside. The script's ``kill``
  (builtin, ``command kill``, ``/bin/kill``, python) cannot reach a process outside:
  none is visible. ``hostname NAME`` changes nothing (no CAP_SYS_ADMIN, own UTS).
* PID 1 of the jail is a small guard (:data:`GUARD`, ``--as-pid-1``) whose only child is the
  script. The guard exits when the script exits (what the script left running gets
  :data:`BACKGROUND_GRACE_S` to end first, so a backgrounded stand-in finishes its record), or when its lifeline (a pipe only the
  importer can write) closes: the importer ended the jail (timeout, Ctrl-C) or died, even
  by SIGKILL, even while bwrap was still setting up. When PID 1 exits, the kernel kills
  every process of the namespace (backgrounded, ``setsid``, double-forked, all of them).
  ``--die-with-parent`` and a PDEATHSIG set before bwrap is executed do the same from
  the outside.
* a filesystem of read-only views: the system directories (``/usr``, ``/etc`` without
  its secrets, the ``/bin``-style links), the importer's Python and its recorder, and
  the directories the caller names (the script's repository, the slime checkout). The
  root itself is read-only. Writable: the jail's own folder (the mirror of the checkout,
  ``HOME``) and a private ``/tmp``; both live in one host temp dir removed afterwards.
  Sockets of the host (Docker's, munge's, Ray's under /tmp) are not in the view.
* ``/proc`` is the jail's own and read-only as a whole; no ``/sys``. Run by root, the jail's
  processes are the host's uid 0 (without capabilities), and a few kernel interfaces check
  only that uid (sysctls such as ``kernel.core_pattern``): none of them is writable here.
* no network but loopback; stdin is /dev/null; a new session (no terminal to inject into);
  no core dumps; no file over :data:`FILE_SIZE_LIMIT`; output kept up to :data:`OUTPUT_LIMIT`.
* what the importer reads back from the jail's folder (the call log, HOME, the mirror) is
  untrusted: no link is followed, the log's records are validated (:func:`read_log`).

What the jail does not do: limit CPU, memory, processes or disk (the timeout bounds the
time; until then a script can use the machine's cores, memory and its temp dir's disk), or
hide what is readable in the views.

When bwrap is missing or the kernel refuses the namespaces, :class:`Jail` raises
:class:`SandboxError` naming what is missing; the script is never run unconfined (there
is no switch to do so). ``$CLAWGYM_BWRAP`` names another bwrap binary (tests use it to
point at one that is missing).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

#: Variables the importer sets itself: ``--env`` cannot replace them (a PATH of the machine's
#: tools would run slime's own ``pkill -9 python`` for real; a HOME outside the jail would
#: receive its ``~`` writes; the importer's variables steer the stand-ins).
RESERVED_ENV = ("PATH", "HOME")
RESERVED_PREFIXES = ("CLAWGYM_IMPORT_", "BASH_FUNC_")

#: Host directories seen read-only when present (symlinks such as /bin -> usr/bin are recreated).
SYSTEM_DIRS = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
#: Secrets under /etc the script has no business reading (the jail runs as root's uid).
HIDDEN_FILES = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/security/opasswd")
HIDDEN_DIRS = ("/etc/munge", "/etc/ssh", "/etc/ssl/private", "/etc/sudoers.d")

#: Namespace and privilege options; a probe proves them before any script runs.
CONFINE = ("--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-ipc",
           "--unshare-cgroup-try", "--cap-drop", "ALL", "--die-with-parent", "--new-session")

#: Seconds given to the jail to go away after it is killed (the kernel does it at once).
_REAP_S = 10.0

#: bwrap path -> None (a jail can be made) or why not; probed once per process.
_PROBED: Dict[str, Optional[str]] = {}


class SandboxError(Exception):
    """No jail can be made, or the caller asked for something the jail refuses."""


def bwrap_path() -> str:
    """The bwrap binary: ``$CLAWGYM_BWRAP`` if set, else ``bwrap`` on PATH."""
    given = os.environ.get("CLAWGYM_BWRAP")
    if given:
        if not (os.path.isfile(given) and os.access(given, os.X_OK)):
            raise SandboxError(
                f"the importer's sandbox needs bubblewrap, and $CLAWGYM_BWRAP={given} is not an executable; "
                "the script was not run (nothing is run unconfined). Install the Debian package `bubblewrap` "
                "or point $CLAWGYM_BWRAP at bwrap.")
        return given
    found = shutil.which("bwrap")
    if not found:
        raise SandboxError(
            "the importer's sandbox needs bubblewrap (`bwrap`), which is not on PATH; the script was not run "
            "(nothing is run unconfined). Install it: apt-get install bubblewrap")
    return found


def check_env(env: Mapping[str, str]) -> None:
    """Refuse ``--env`` names the importer owns (PATH, HOME, its own variables)."""
    for name in env:
        if name in RESERVED_ENV or name.startswith(RESERVED_PREFIXES):
            why = {
                "PATH": "the script's PATH holds only the importer's stand-ins (a real PATH would let it kill, "
                        "start or change things on this machine)",
                "HOME": "the script's HOME is a private folder of the import, so its ~ writes are reported "
                        "and land nowhere",
            }.get(name, "the importer sets it to run its stand-ins")
            raise SandboxError(f"--env {name}: cannot be given ({why}); the script was not run")
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
            raise SandboxError(f"--env {name!r}: not a variable name; the script was not run")


def interpreter() -> str:
    """The Python the stand-ins run on: the base interpreter (a venv's python needs its venv folder,
    which is not in the jail; the recorder uses the standard library only)."""
    base = getattr(sys, "_base_executable", None) or sys.executable
    return os.path.realpath(base)


def _shared_roots() -> set:
    roots = {"/", "/tmp", "/var", "/var/tmp", "/run", "/var/run", "/dev", "/dev/shm", "/home", "/root",
             "/proc", "/sys", tempfile.gettempdir()}
    roots.add(os.path.expanduser("~"))
    return {os.path.realpath(r) for r in roots}


@functools.lru_cache(maxsize=None)
def _disable_userns_supported(bwrap: str) -> bool:
    try:
        out = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return "--disable-userns" in out.stdout + out.stderr


def _system_view() -> List[str]:
    args: List[str] = []
    for d in SYSTEM_DIRS:
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    for f in HIDDEN_FILES:
        if os.path.isfile(f):
            args += ["--ro-bind", "/dev/null", f]
    for d in HIDDEN_DIRS:
        if os.path.isdir(d):
            args += ["--tmpfs", d]
    # /proc read-only as a whole: the jail's processes run as uid 0 of the host (root maps
    # itself into the user namespace), and sysctls such as kernel.core_pattern check only that
    # uid on write (bwrap 0.8 covers /proc/irq and /proc/bus, not /proc/sys).
    return args + ["--proc", "/proc", "--remount-ro", "/proc", "--dev", "/dev"]


def _python_views() -> List[str]:
    """What the importer's base Python needs in the jail (outside the system dirs)."""
    out: List[str] = []
    for p in (os.path.dirname(interpreter()), os.path.realpath(sys.base_prefix)):
        if p not in out and not any(p == d or p.startswith(d + "/") for d in SYSTEM_DIRS):
            out.append(p)
    return sorted(out, key=lambda p: p.count("/"))


def _confine(bwrap: str) -> List[str]:
    return [*CONFINE, *(["--disable-userns"] if _disable_userns_supported(bwrap) else []), "--as-pid-1"]


def probe(bwrap: Optional[str] = None) -> str:
    """Prove that a jail can be made here (once per process); return bwrap's path.

    Raises :class:`SandboxError` with bwrap's own words when it cannot."""
    bwrap = bwrap or bwrap_path()
    key = bwrap
    if key not in _PROBED:
        # The jail's PID 1 is the importer's Python: prove that it starts in there too.
        views: List[str] = []
        for p in _python_views():
            views += ["--ro-bind", p, p]
        try:
            out = subprocess.run([bwrap, *_confine(bwrap), *_system_view(), *views, "--remount-ro", "/", "--",
                                  interpreter(), "-I", "-S", "-c", "pass"],
                                 capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
            _PROBED[key] = None if out.returncode == 0 else (out.stderr.strip() or f"exit status {out.returncode}")
        except (OSError, subprocess.SubprocessError) as exc:
            _PROBED[key] = str(exc)
    why = _PROBED[key]
    if why is not None:
        raise SandboxError(
            f"the importer's sandbox cannot be made on this machine ({bwrap}: {why}); it needs user, PID, "
            "network, UTS and IPC namespaces (kernel, /proc/sys/user/max_user_namespaces, a container that "
            "allows them); the script was not run (nothing is run unconfined).")
    return bwrap


@dataclass
class Outcome:
    """How the script ended."""

    returncode: int
    output: str
    #: The limit it ran past, in seconds; None when it ended by itself.
    timed_out: Optional[float] = None


def tree_state(root: Path, *, links: bool = False) -> Dict[str, Tuple[int, int]]:
    """(size, mtime) of the regular files under root, not following symlinks (root included: the
    script may have replaced its HOME or its checkout mirror by a link to the host's /). With
    ``links``, symlinks too, files and folders alike (in the checkout mirror a link replaced or
    removed is a write or a deletion of the repository's file)."""
    out: Dict[str, Tuple[int, int]] = {}
    if os.path.islink(root) or not os.path.isdir(root):
        return out
    for dirpath, dirs, files in os.walk(root, followlinks=False):
        for name in files + (dirs if links else []):
            p = Path(dirpath) / name
            try:
                st = p.lstat()
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and name in files or links and stat.S_ISLNK(st.st_mode):
                out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return out


class Jail:
    """One import's jail. Use as a context manager; the folder is removed on exit.

    ``dir`` is a host temp dir seen at the same path inside the jail (writable): the
    caller lays out the checkout mirror and stand-ins in it. ``home`` is the script's
    HOME, ``tmp`` the host folder behind the jail's private /tmp. :meth:`readonly` adds
    host paths the script may read; :meth:`run` runs one command in the jail.
    """

    def __init__(self, prefix: str = "clawgym-import-"):
        self.bwrap = probe()
        self._tmp = tempfile.TemporaryDirectory(prefix=prefix)
        self.dir = Path(os.path.realpath(self._tmp.name))
        self.home = self.dir / "home"
        self.tmp = self.dir / "tmp"
        self.home.mkdir()
        self.tmp.mkdir()
        self._readonly: List[str] = []
        self._readonly_here: List[str] = []
        self._before: Dict[str, Dict[str, Tuple[int, int]]] = {}
        for p in _python_views():
            self.readonly(p)

    def __enter__(self) -> "Jail":
        return self

    def __exit__(self, *exc: object) -> None:
        self._tmp.cleanup()

    def readonly(self, path: os.PathLike | str) -> None:
        """Let the script read ``path`` (at the same path), never write it.

        A folder the whole machine shares (``/``, ``/tmp``, a home) is refused: it holds other
        programs' sockets (Ray's under /tmp/ray, an engine's under /run), and a socket can be
        connected to through a read-only view."""
        p = os.path.realpath(str(path))
        if p in _shared_roots():
            raise SandboxError(
                f"{p} would be seen whole by the script (its repository, or the slime checkout); it is a folder "
                "the machine shares, with other programs' sockets in it. Put the script in its own folder "
                "(a checkout) or pass --slime-root; the script was not run")
        if os.path.exists(p) and p not in self._readonly:
            self._readonly.append(p)

    def readonly_inside(self, path: os.PathLike | str) -> None:
        """A path inside :attr:`dir` the script may read but not change (the stand-ins)."""
        self._readonly_here.append(os.path.realpath(str(path)))

    def argv(self, command: Sequence[str], cwd: os.PathLike | str) -> List[str]:
        args = [self.bwrap, *_confine(self.bwrap), *_system_view()]
        # Shallow paths first, so a deeper view lands on top of the one holding it.
        views = [("--ro-bind", p) for p in self._readonly if p not in SYSTEM_DIRS] + [("--bind", str(self.dir))]
        views.sort(key=lambda v: v[1].count("/"))
        layout = ["--bind", str(self.tmp), "/tmp"]
        for how, p in views:
            layout += [how, p, p]
        for p in self._readonly_here:
            layout += ["--ro-bind", p, p]
        # The root (bwrap's tmpfs holding the mount points) read-only last: a write anywhere but the
        # writable views fails, and the failure is reported (refused_writes).
        args += [*layout, "--remount-ro", "/", "--chdir", str(cwd), "--", *command]
        return args

    def snapshot(self) -> None:
        """Remember HOME and /tmp before the run (see :meth:`written`)."""
        self._before = {"home": tree_state(self.home), "tmp": tree_state(self.tmp)}

    def written(self) -> List[str]:
        """Files the script created or changed in its HOME and /tmp, as it named them
        (``~/x``, ``/tmp/x``)."""
        out = []
        # A read-only view of a file under /tmp (clawgym itself installed there, e.g. a checkout in
        # /tmp) is mounted onto the jail's /tmp: bwrap leaves its empty mount point behind there.
        views = set(self._readonly)
        for label, root, shown in (("home", self.home, "~"), ("tmp", self.tmp, "/tmp")):
            before = self._before.get(label, {})
            for rel, st in sorted(tree_state(root).items()):
                if before.get(rel) != st and not (label == "tmp" and f"/tmp/{rel}" in views):
                    out.append(f"{shown}/{rel}")
        return out

    def run(self, command: Sequence[str], *, env: Mapping[str, str], cwd: os.PathLike | str,
            timeout: float) -> Outcome:
        """Run ``command`` in the jail; every process it started has ended when this returns.

        Output is kept up to :data:`OUTPUT_LIMIT` bytes (the last ones): a script printing
        without end fills no memory."""
        # The lifeline: PID 1 of the jail (GUARD) holds its read end, only this process its write
        # end. When the write end closes (we end the jail, or this process dies however it dies),
        # PID 1 exits and the kernel kills the whole PID namespace. This covers what PDEATHSIG
        # alone cannot: bwrap orphaned while it still sets the jail up.
        life_r, life_w = os.pipe()
        guard = [interpreter(), "-I", "-S", "-c", GUARD, str(life_r), *command]
        try:
            proc = subprocess.Popen(self.argv(guard, cwd), env=dict(env), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, pass_fds=(life_r,),
                                    preexec_fn=_child_setup(os.getpid()))
        except BaseException:
            os.close(life_w)
            raise
        finally:
            os.close(life_r)
        out = _Tail()
        try:
            ended = out.read(proc, timeout)
            if not ended:
                self._kill(proc, out, life_w)
                life_w = -1
                return Outcome(-int(signal.SIGKILL), out.text() + f"\n(clawgym import: timed out after {timeout:g} s)",
                               timed_out=timeout)
            proc.wait()
        except BaseException:
            # Ctrl-C or any error of ours: the jail goes with us.
            if life_w != -1:
                self._kill(proc, out, life_w)
                life_w = -1
            raise
        finally:
            if life_w != -1:
                os.close(life_w)
        text = out.text()
        if proc.returncode == 1 and text.startswith("bwrap: "):
            # bwrap itself failed while making the jail (a view it could not mount): nothing ran.
            raise SandboxError(f"the importer's sandbox could not be set up ({text.strip()}); the script "
                               "was not run (nothing is run unconfined)")
        return Outcome(proc.returncode, text)

    @staticmethod
    def _kill(proc: "subprocess.Popen[bytes]", out: "_Tail", life_w: int) -> None:
        # Closing the lifeline ends PID 1; killing bwrap (--die-with-parent) ends it too. Either
        # way the kernel kills every process of the PID namespace, which closes the pipe.
        os.close(life_w)
        proc.kill()
        out.read(proc, _REAP_S)
        try:
            proc.wait(timeout=_REAP_S)
        except subprocess.TimeoutExpired:
            pass


#: Seconds the jail's PID 1 waits, once the script has ended, for what it left running (a stand-in
#: it started with ``&`` still writing its record on a loaded machine) before all of it is killed.
BACKGROUND_GRACE_S = 3.0

#: PID 1 of the jail: runs the command as its child and exits when the command exits (with its
#: status) or when the lifeline (fd argv[1]) closes, i.e. the importer ended the jail or died.
#: Standard library only, run with -I -S by the base interpreter.
GUARD = """\
import os, select, sys, time
GRACE = {grace}
life = int(sys.argv[1])
pid = os.fork()
if pid == 0:
    os.close(life)
    os.execv(sys.argv[2], sys.argv[2:])
child = os.pidfd_open(pid)
poll = select.poll()
poll.register(life, select.POLLIN | select.POLLHUP)
poll.register(child, select.POLLIN)
while True:
    ready = [fd for fd, _ in poll.poll()]
    if child in ready:
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        break
    if life in ready:
        os._exit(137)
# What the script left running (a server it started with &: a stand-in still writing its record)
# has GRACE s to end; as PID 1 we reap it. Then our exit kills whatever is left.
poll.unregister(child)
end = time.monotonic() + GRACE
while time.monotonic() < end:
    try:
        if os.waitpid(-1, os.WNOHANG)[0]:
            continue
    except ChildProcessError:
        break
    if poll.poll(50):
        os._exit(137)
os._exit(code if code >= 0 else 128 - code)
""".replace("{grace}", repr(BACKGROUND_GRACE_S))


#: Bytes of the script's output kept (the last ones).
OUTPUT_LIMIT = 4 << 20
#: Largest file the script may write (RLIMIT_FSIZE): launch scripts write small files, and a
#: script writing without end must not fill the disk before its timeout.
FILE_SIZE_LIMIT = 64 << 20
_PR_SET_PDEATHSIG = 1


def _child_setup(parent: int):
    """What runs in the forked child before bwrap is executed: die with the importer from the
    first instruction on (bwrap sets its own PDEATHSIG only later; a parent dying in between
    would leave bwrap running), and per-process limits the jail inherits (no core dumps, no
    huge files). Not RLIMIT_NPROC: it counts per user, and uid 0 is exempt."""
    import ctypes
    import resource

    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def setup() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the importer died before the prctl
            os._exit(1)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))

    return setup


class _Tail:
    """The last :data:`OUTPUT_LIMIT` bytes read from a process's stdout."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.dropped = 0
        self.eof = False

    def read(self, proc: "subprocess.Popen[bytes]", within: float) -> bool:
        """Read until EOF (True) or ``within`` seconds passed (False)."""
        import selectors
        import time

        if self.eof or proc.stdout is None:
            return True
        deadline = time.monotonic() + within
        fd = proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                if not sel.select(timeout=min(left, 1.0)):
                    continue
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    self.eof = True
                    proc.stdout.close()
                    return True
                self.buf += chunk
                if len(self.buf) > OUTPUT_LIMIT:
                    cut = len(self.buf) - OUTPUT_LIMIT
                    del self.buf[:cut]
                    self.dropped += cut

    def text(self) -> str:
        head = f"(clawgym import: {self.dropped} bytes of earlier output not kept)\n" if self.dropped else ""
        return head + self.buf.decode(errors="replace")


#: Largest call log read back (the recorder appends one line per stand-in call).
LOG_LIMIT = 64 << 20
_RECORD_KEYS = {"tool": str, "argv": list, "cwd": str, "env": dict}


def read_log(path: Path) -> Tuple[List[Dict[str, object]], int]:
    """The recorder's call log, read as untrusted input: the script can write it (it runs in the
    jail too). Returns (records, lines that were not a record). A log the script replaced by a
    link, a FIFO or a device is not followed or read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return [], (1 if os.path.islink(path) else 0)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return [], 1
        data = f.read(LOG_LIMIT)
    records: List[Dict[str, object]] = []
    bad = 0
    for line in data.decode(errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            bad += 1
            continue
        if (isinstance(rec, dict) and all(isinstance(rec.get(k), t) for k, t in _RECORD_KEYS.items())
                and all(isinstance(a, str) for a in rec["argv"])
                and all(isinstance(k, str) and isinstance(v, str) for k, v in rec["env"].items())):
            records.append(rec)
        else:
            bad += 1
    return records, bad


#: What a tool prints when the jail refused a write (strerror(EROFS), the script runs with LANG=C.UTF-8).
_READ_ONLY = "Read-only file system"


def refused_writes(output: str) -> List[str]:
    """Lines where a write of the script hit a read-only view (its repository, the system)."""
    seen: List[str] = []
    for line in output.splitlines():
        if _READ_ONLY in line:
            line = line.strip()
            if line not in seen:
                seen.append(line)
    return seen


def map_paths(text: str, mapping: Iterable[Tuple[str, str]]) -> str:
    """``text`` with each jail path replaced by what it stands for (longest first)."""
    for tmp, real in sorted(mapping, key=lambda m: len(m[0]), reverse=True):
        text = text.replace(tmp, real)
    return text
