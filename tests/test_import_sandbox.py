"""``clawgym import`` runs an untrusted launch script in a jail (clawgym/importer/sandbox.py).

A corpus of hostile scripts, one per trick of issue 17 (items 1-4), each aimed only at
canaries this test made: a canary folder and file outside the checkout, a canary process,
the fixture slime checkout itself, the machine's hostname, a file in the real HOME. After
each import the host must be untouched: canaries intact, the canary process alive, the
hostname unchanged, the fixture checkout byte for byte as before, no process left whose
command line carries the test's unique marker, the importer's temp dir gone.

Safety of the suite itself: hostile scripts run only after :func:`proven_jail` showed, with
a harmless script, that the jail has its own user/PID/network/UTS/IPC namespaces and no
capabilities; if it cannot show that, every hostile test fails without running its script.
Without bwrap they are skipped, saying so, except in CI (``CLAWGYM_REQUIRE_SANDBOX=1``), where
they fail.
There is no way to run a script unconfined, so none of these can run outside the jail.
"""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from clawgym.importer import sandbox
from clawgym.importer.capture import CaptureError, classify, run_script
from tests.conftest import ROOT
from tests.fixtures.slime_checkout import build_slime_checkout

#: Short limits keep the suite fast; nothing here needs long.
TIMEOUT = 20.0
NAMESPACES = ("user", "pid", "net", "uts", "ipc")


# ---------------------------------------------------------------- helpers


def _tree_digest(root: Path) -> Dict[str, Tuple[str, str]]:
    """Path -> (kind, content hash or link target) of everything under root (not following links)."""
    out: Dict[str, Tuple[str, str]] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            elif p.is_dir():
                out[rel] = ("dir", oct(p.stat().st_mode))
            else:
                out[rel] = ("file", hashlib.sha256(p.read_bytes()).hexdigest() + oct(p.stat().st_mode))
    return out


def _marked(marker: str) -> List[int]:
    """Processes whose command line carries ``marker`` (none of ours does)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if marker.encode() in cmd:
            pids.append(int(entry))
    return pids


def _describe(pid: int) -> str:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError as exc:
        return str(exc)
    keep = [ln for ln in status.splitlines() if ln.split(":")[0] in ("State", "PPid", "NSpid")]
    return cmd[:200] + " | " + " ".join(keep)


def _wait_gone(marker: str, within: float = 5.0) -> List[int]:
    """The kernel kills a PID namespace's processes when its init exits; give it a moment."""
    deadline = time.monotonic() + within
    while (left := _marked(marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _host_ns(kind: str) -> str:
    return os.readlink(f"/proc/self/ns/{kind}")


class Host:
    """Canaries outside the jail, and the checks that they survived."""

    def __init__(self, tmp_path: Path):
        self.marker = f"cgmark{uuid.uuid4().hex[:12]}"
        self.dir = tmp_path / "canary"
        self.dir.mkdir()
        self.file = self.dir / "keep.txt"
        self.file.write_text("canary\n")
        (self.dir / "sub").mkdir()
        (self.dir / "sub" / "deep.txt").write_text("deep canary\n")
        # A file in the real HOME that the script tries to create; it must never appear.
        self.home_file = Path(os.path.expanduser("~")) / f"{self.marker}-home.txt"
        self.slime = build_slime_checkout(tmp_path / "slime")
        (self.slime / "README.md").write_text("slime fixture readme\n")
        (self.slime / "canary_dir").mkdir()
        (self.slime / "canary_dir" / "data.txt").write_text("checkout canary\n")
        self.tmpdir = tmp_path / "importer-tmp"
        self.tmpdir.mkdir()
        self.proc = subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL)
        self.hostname = socket.gethostname()
        self._before = None
        # How long the kernel may take to reap a dead jail's processes.
        self.settle_s = 5.0

    def script(self, body: str) -> Path:
        """A hostile launch script in the fixture checkout, named with the marker; ``{dir}``, ``{file}``,
        ``{pid}``, ``{marker}``, ``{home_file}`` in ``body`` name the canaries."""
        path = self.slime / "scripts" / f"hostile-{self.marker}.sh"
        text = textwrap.dedent(body)
        for key, value in (("{dir}", self.dir), ("{file}", self.file), ("{pid}", self.proc.pid),
                           ("{marker}", self.marker), ("{home_file}", self.home_file.name)):
            text = text.replace(key, str(value))
        path.write_text("#!/bin/bash\n" + text)
        self._before = (_tree_digest(self.slime), _tree_digest(self.dir))
        return path

    def assert_untouched(self) -> None:
        assert self.proc.poll() is None, "the canary process was killed"
        assert self.file.read_text() == "canary\n"
        assert (self.dir / "sub" / "deep.txt").read_text() == "deep canary\n"
        assert self._before is not None
        assert _tree_digest(self.dir) == self._before[1]
        assert _tree_digest(self.slime) == self._before[0], "the real slime checkout changed"
        assert socket.gethostname() == self.hostname
        assert Path("/proc/sys/kernel/hostname").read_text().strip() == self.hostname
        assert not self.home_file.exists()
        assert _wait_gone(self.marker, self.settle_s) == [], "processes of the script outlived the import"
        assert list(self.tmpdir.iterdir()) == [], "the importer's temp dir was left behind"

    def close(self) -> None:
        # Only the canary process this test started, by its pid.
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        if self.home_file.exists():  # never expected; do not leave it if a check failed
            self.home_file.unlink()


@pytest.fixture(scope="module")
def proven_jail(tmp_path_factory):
    """A harmless script shows the jail works: own namespaces, no capabilities, a read-only
    checkout, its own PID namespace (the script is PID 2, under the jail's guard). Hostile
    scripts run only once this passed."""
    try:
        sandbox.probe()
    except sandbox.SandboxError as exc:
        # In CI (CLAWGYM_REQUIRE_SANDBOX=1, .ci/run) the corpus must run: fail. Elsewhere say why.
        if os.environ.get("CLAWGYM_REQUIRE_SANDBOX") == "1":
            pytest.fail(f"CLAWGYM_REQUIRE_SANDBOX=1 but no jail on this machine, so no hostile script is run: {exc}")
        pytest.skip(f"no jail on this machine (clawgym import refuses to run scripts here too): {exc}")
    root = Path(os.path.realpath(tmp_path_factory.mktemp("proof")))
    slime = build_slime_checkout(root / "slime")
    script = slime / "scripts" / "proof.sh"
    script.write_text(textwrap.dedent("""\
        #!/bin/bash
        for ns in user pid net uts ipc; do echo "ns $ns $(readlink /proc/self/ns/$ns)"; done
        grep -E '^Cap(Eff|Prm|Bnd):' /proc/self/status
        echo "pid $$ ppid $PPID"
        echo "procs $(ls /proc | grep -c '^[0-9]')"
        ( echo x > "$(dirname "$0")/../train.py" ) 2>&1 | sed 's/^/write /'
        for f in /proc/sys/kernel/core_pattern /proc/sys/vm/drop_caches /proc/self/oom_score_adj; do
          [ -w "$f" ] && echo "global-write $f"   # an access check only: nothing is written
        done
        echo "ifaces $(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\\n' ' ')"
    """))
    cap = run_script(script, timeout=TIMEOUT)
    lines = cap.output.splitlines()
    got = {ln.split()[1]: ln.split()[2] for ln in lines if ln.startswith("ns ")}
    problems = [f"{k} namespace is the host's" for k in NAMESPACES if got.get(k) in (None, _host_ns(k))]
    caps = [ln for ln in lines if ln.startswith("Cap")]
    if len(caps) != 3 or any(not ln.split()[1].strip("0") == "" for ln in caps):
        problems.append(f"capabilities left: {caps}")
    # PID 1 is the jail's guard (sandbox.GUARD), the script its only child.
    if "pid 2 ppid 1" not in lines:
        problems.append("the script is not the child of PID 1 of its own PID namespace")
    if not any(ln.startswith("write ") and "Read-only file system" in ln for ln in lines):
        problems.append("the checkout is writable from the jail")
    if (slime / "train.py").read_text().startswith("x"):
        problems.append("the jail wrote the real checkout")
    # The jail runs as the host's uid 0; sysctls check only that uid (kernel.core_pattern would be
    # a way out), so /proc is read-only as a whole.
    problems += [f"writable from the jail: {ln.split()[1]}" for ln in lines if ln.startswith("global-write ")]
    nets = [ln for ln in lines if ln.startswith("ifaces")]
    if not nets or set(nets[0].split()[1:]) != {"lo"}:
        problems.append(f"network interfaces besides loopback: {nets}")
    if problems:
        pytest.fail("the jail is not proven; no hostile script is run: " + "; ".join(problems)
                    + "\n" + cap.output)
    return True


@pytest.fixture
def bare_host(tmp_path, monkeypatch):
    """Canaries, for tests that must not reach any jail (the refusals)."""
    h = Host(Path(os.path.realpath(tmp_path)))
    # The importer's temp dirs go here, so the test can see that none is left behind.
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(h.tmpdir))
    try:
        yield h
    finally:
        h.close()


@pytest.fixture
def host(bare_host, proven_jail):
    """Canaries, for hostile scripts: only once the jail is proven."""
    return bare_host


def _import(script: Path, capsys, *args: str) -> Tuple[int, str]:
    from clawgym.cli import main

    # The experiment goes next to the checkout, not into it (the checkout must stay as it was).
    code = main(["import", str(script), "--out", str(script.parent.parent.parent / "conf-out"), *args])
    out = capsys.readouterr()
    return code, out.out + out.err


def _rows(cap) -> List[str]:
    return [text for _kind, text in classify(cap)]


# ---------------------------------------------------------------- the proof and the refusals


def test_jail_has_its_own_namespaces_and_no_capabilities(proven_jail):
    assert proven_jail


def test_the_host_checks_notice_what_they_guard(bare_host):
    """The checks of the corpus can fail (shown without running any script): a changed canary,
    a changed checkout, a process carrying the marker."""
    bare_host.script("echo hi\n")
    bare_host.file.write_text("changed\n")
    with pytest.raises(AssertionError):
        bare_host.assert_untouched()
    bare_host.file.write_text("canary\n")
    (bare_host.slime / "README.md").write_text("changed\n")
    with pytest.raises(AssertionError, match="slime checkout changed"):
        bare_host.assert_untouched()
    (bare_host.slime / "README.md").write_text("slime fixture readme\n")
    stray = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", bare_host.marker])
    try:
        _wait_marked(bare_host.marker, 1)
        assert _marked(bare_host.marker) == [stray.pid]
        bare_host.settle_s = 0.2
        with pytest.raises(AssertionError, match="outlived"):
            bare_host.assert_untouched()
    finally:
        stray.kill()
        stray.wait(timeout=10)
    bare_host.assert_untouched()


def test_without_bwrap_the_import_refuses_and_runs_nothing(bare_host, monkeypatch, capsys):
    """A missing bwrap: refused, saying what is missing; the script (which would write a
    canary if it ran at all) is never run unconfined."""
    target = bare_host.dir / "ran-unconfined.txt"
    script = bare_host.script(f"echo ran > {target}\n")
    monkeypatch.setenv("CLAWGYM_BWRAP", str(bare_host.dir / "no-such-bwrap"))
    with pytest.raises(CaptureError, match="bubblewrap"):
        run_script(script, timeout=TIMEOUT)
    code, out = _import(script, capsys)
    assert code == 2 and "the script was not run" in out and "no-such-bwrap" in out
    assert not target.exists()
    bare_host.assert_untouched()


def test_refused_namespaces_make_the_import_refuse(bare_host, monkeypatch, capsys):
    """A bwrap that cannot create namespaces (as in a locked-down container): refused with its reason."""
    fake = bare_host.dir.parent / "bin" / "bwrap"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    target = bare_host.dir / "ran-unconfined.txt"
    script = bare_host.script(f"echo ran > {target}\n")
    monkeypatch.setenv("CLAWGYM_BWRAP", str(fake))
    code, out = _import(script, capsys)
    assert code == 2, out
    assert "sandbox cannot be made" in out and "No permissions to create new namespace" in out
    assert "the script was not run" in out
    assert not target.exists()
    bare_host.assert_untouched()


def test_a_script_whose_repository_is_a_shared_folder_is_refused(host, capsys):
    """A script lying loose in the temp dir (its repository would be all of /tmp, with other
    programs' sockets): refused, not run."""
    import tempfile

    loose = Path(tempfile.gettempdir()) / f"loose-{host.marker}.sh"
    loose.write_text(f"echo ran > ~/{host.home_file.name}\n")
    host.script("echo unused\n")
    try:
        with pytest.raises(CaptureError, match="folder the machine shares"):
            run_script(loose, timeout=TIMEOUT)
        code, out = _import(loose, capsys)
        assert code == 2 and "the script was not run" in out, out
    finally:
        loose.unlink()
    host.assert_untouched()


@pytest.mark.parametrize("name", ["PATH", "HOME", "CLAWGYM_IMPORT_PY", "CLAWGYM_IMPORT_LOG", "BASH_FUNC_kill%%"])
def test_env_cannot_replace_the_importers_own_variables(name, host, capsys):
    value = "/usr/bin:/bin" if name == "PATH" else str(host.dir)
    script = host.script("""\
        pkill -9 -f {marker}
        echo owned > ~/{home_file}
        touch {file}
    """)
    code, out = _import(script, capsys, "--env", f"{name}={value}")
    assert code == 2, out
    assert f"--env {name}" in out and "cannot be given" in out and "the script was not run" in out
    host.assert_untouched()


# ---------------------------------------------------------------- item 1: untrusted shell runs confined


def test_rm_rf_of_a_folder_outside_changes_nothing(host):
    script = host.script("""\
        /bin/rm -rf {dir}
        /usr/bin/rm -rf {dir}/sub
        rm -rf {dir}
        /bin/rm -rf "$(dirname "$0")/../canary_dir/"
        /bin/rm -rf "$(dirname "$0")/../canary_dir"
    """)
    cap = run_script(script, timeout=TIMEOUT)
    assert cap.timed_out is None
    # The checkout's own folder is seen read-only: the refusal is reported, under the real path.
    refused = [r for r in _rows(cap) if "refused by the import's read-only view" in r]
    assert any(f"{host.slime}/scripts/../canary_dir/data.txt" in r for r in refused), _rows(cap)
    # rm -rf of the mirror's link to it: a deletion, reported under the real path.
    assert f"the script deletes {host.slime / 'canary_dir'} (an experiment cannot delete files)" in _rows(cap)
    host.assert_untouched()


def test_writes_through_the_mirror_never_reach_the_checkout_and_are_reported(host, capsys):
    script = host.script("""\
        echo pwned > "$(dirname "$0")/../README.md"
        echo pwned >> "$(dirname "$0")/../scripts/models/qwen3-4B.sh"
        sed -i 's/slime/PWNED/' "$(dirname "$0")/../train.py"
    """)
    code, out = _import(script, capsys)
    assert code == 2, out
    # Named as the script named them, under the real checkout; never a temp path.
    assert f"{host.slime}/scripts/../README.md: Read-only file system" in out
    assert f"{host.slime}/scripts/../scripts/models/qwen3-4B.sh: Read-only file system" in out
    # sed -i replaced the mirror's link by a file: reported as a write of the checkout's file.
    assert f"the script writes {host.slime}/train.py" in out
    assert "clawgym-import-" not in out and str(host.tmpdir) not in out
    host.assert_untouched()


@pytest.mark.parametrize("how", ["awk", "xargs", "env", "sed", "python"])
def test_tools_treated_as_harmless_run_confined(how, host):
    body = {
        "awk": """awk 'BEGIN { system("/bin/rm -rf {dir}; echo x > {file}; /bin/kill -9 {pid}") }'\n""",
        "xargs": "echo {dir} | xargs /bin/rm -rf\necho {pid} | xargs /bin/kill -9\n",
        "env": "env /bin/rm -rf {dir}\nenv /bin/kill -9 {pid}\nenv /bin/sh -c 'echo x > {file}'\n",
        "sed": "sed -i 's/canary/PWNED/' {file}\nsed -n '1e /bin/rm -rf {dir}' {file}\n",
        "python": ("\"$CLAWGYM_IMPORT_PY\" -c \"import os, shutil; open('{file}', 'w').write('x'); "
                   "shutil.rmtree('{dir}', ignore_errors=True); os.kill({pid}, 9)\"\n"
                   "\"$CLAWGYM_IMPORT_PY\" -c \"import subprocess; subprocess.run(['/bin/kill', '-9', '{pid}'])\"\n"),
    }[how]
    script = host.script(body)
    cap = run_script(script, timeout=TIMEOUT)
    assert cap.timed_out is None, cap.output
    host.assert_untouched()


@pytest.mark.parametrize("how", ["builtin kill -9 $PPID", "builtin kill -9 {pid}", "command kill -9 {pid}",
                                 "/bin/kill -9 {pid}", "/usr/bin/kill -KILL {pid}", "kill -9 {pid}"])
def test_kill_cannot_reach_a_process_outside(how, host):
    script = host.script(how + "\necho still-here\n")
    cap = run_script(script, timeout=TIMEOUT)
    assert cap.timed_out is None
    host.assert_untouched()


def test_hostname_cannot_rename_the_machine(host):
    script = host.script("""\
        hostname hostile-{marker}
        /bin/hostname hostile-{marker}
        echo "inside: $(hostname)"
    """)
    cap = run_script(script, timeout=TIMEOUT)
    assert f"inside: {host.hostname}" in cap.output
    host.assert_untouched()


def test_home_writes_land_in_the_jail_and_are_reported_as_the_script_named_them(host):
    script = host.script("""\
        echo x > ~/{home_file}
        echo y > "$HOME/notes.txt"
        mkdir -p ~/{marker}-dir
        echo z > /tmp/{marker}-tmp.txt
    """)
    cap = run_script(script, timeout=TIMEOUT)
    rows = _rows(cap)
    assert f"the script writes ~/{host.home_file.name} (a file an experiment cannot create)" in rows
    assert "the script writes ~/notes.txt (a file an experiment cannot create)" in rows
    assert any(r.startswith(f"`mkdir -p ~/{host.marker}-dir`") for r in rows), rows
    assert f"the script writes /tmp/{host.marker}-tmp.txt (a file an experiment cannot create)" in rows
    assert "clawgym-import-" not in repr(rows)
    assert not Path(f"/tmp/{host.marker}-tmp.txt").exists()
    host.assert_untouched()


def test_links_planted_in_the_import_dir_are_not_followed_by_the_importer(host):
    """The script can change its own import dir; the importer (root, outside the jail) reads it
    back without following a link to the host: the call log, HOME and the mirror."""
    script = host.script("""\
        ROOT="$(cd "$(dirname "$0")/.." && pwd)"
        cd /
        /bin/ln -sf {file} "$CLAWGYM_IMPORT_LOG"
        /bin/rm -rf "$HOME" && /bin/ln -s {dir} "$HOME"
        /bin/rm -rf "$ROOT" && /bin/ln -s {dir} "$ROOT"
    """)
    cap = run_script(script, timeout=TIMEOUT)
    rows = _rows(cap)
    assert not any("keep.txt" in r or "deep.txt" in r for r in rows), rows
    assert any("call log" in r for r in rows), rows
    assert cap.calls == []
    host.assert_untouched()


def test_a_forged_call_log_is_reported_not_trusted_blindly(host):
    script = host.script("""\
        echo 'not json' >> "$CLAWGYM_IMPORT_LOG"
        echo '{"tool": "ray", "argv": "job submit"}' >> "$CLAWGYM_IMPORT_LOG"
        echo x
    """)
    cap = run_script(script, timeout=TIMEOUT)
    assert cap.calls == [] and cap.forged_log_lines == 2
    assert any("line(s) into the importer's call log" in r for r in _rows(cap))
    host.assert_untouched()


# ---------------------------------------------------------------- item 2: nothing outlives the import


def test_busy_loops_beyond_the_timeout_are_killed_and_reported(host, capsys):
    script = host.script("""\
        ( while :; do :; done ) &
        /usr/bin/setsid /bin/bash -c 'while :; do :; done' {marker} &
        while :; do :; done
    """)
    t0 = time.monotonic()
    code, out = _import(script, capsys, "--timeout", "1.5")
    assert code == 2, out
    assert "timed out after 1.5 s (--timeout)" in out and "exit status -" not in out
    assert time.monotonic() - t0 < 1.5 + 10
    host.assert_untouched()


def test_background_processes_end_when_the_script_ends(host):
    script = host.script("""\
        ( while :; do :; done ) &
        /usr/bin/setsid /bin/bash -c 'spin() { while :; do :; done; }; spin' {marker} &
        nohup /bin/bash -c 'while :; do :; done' &
        echo done
    """)
    t0 = time.monotonic()
    cap = run_script(script, timeout=60)
    assert cap.timed_out is None and cap.returncode == 0, cap.output
    assert time.monotonic() - t0 < 30
    host.assert_untouched()


def test_a_flood_of_output_or_a_huge_file_is_bounded(host):
    """Output is kept up to its last 4 MiB; no file over 64 MiB is written (the writer gets SIGXFSZ)."""
    script = host.script("""\
        /usr/bin/head -c 12000000 /dev/zero | /usr/bin/tr '\\0' 'x'
        echo
        /usr/bin/head -c 80000000 /dev/zero > ~/big.bin
        /usr/bin/stat -c 'big %s' ~/big.bin
    """)
    cap = run_script(script, timeout=60)
    assert cap.timed_out is None, cap.output[-2000:]
    assert "bytes of earlier output not kept" in cap.output
    assert len(cap.output) < sandbox.OUTPUT_LIMIT + 10_000
    assert f"big {sandbox.FILE_SIZE_LIMIT}" in cap.output
    host.assert_untouched()


def test_timeout_must_be_positive(host, capsys):
    script = host.script("echo hi\n")
    code, out = _import(script, capsys, "--timeout", "0")
    assert code == 2 and "--timeout" in out
    host.assert_untouched()


def _importer_child(script: Path, tmpdir: Path) -> subprocess.Popen:
    code = ("import sys; from clawgym.importer.capture import run_script; "
            f"run_script({str(script)!r}, timeout=120)")
    env = {**os.environ, "TMPDIR": str(tmpdir), "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", code], env=env, cwd=ROOT, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _wait_marked(marker: str, n: int, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while len(_marked(marker)) < n and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(_marked(marker)) >= n, "the script did not start"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_interrupting_the_importer_ends_every_process_of_the_script(sig, host):
    """Ctrl-C (SIGINT) or SIGKILL of the importer: the jail dies with it (--die-with-parent),
    the kernel ends every process of its PID namespace. After Ctrl-C the temp dir is removed
    too; a SIGKILLed importer cannot remove it (only its processes are guaranteed gone)."""
    script = host.script("""\
        ( while :; do :; done ) &
        /usr/bin/setsid /bin/bash -c 'while :; do :; done' {marker} &
        while :; do :; done
    """)
    child = _importer_child(script, host.tmpdir)
    try:
        # The importer, bwrap, the guard, the script and its two loops.
        _wait_marked(host.marker, 6)
        os.kill(child.pid, sig)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=10)
    left = _wait_gone(host.marker)
    assert left == [], [(pid, _describe(pid)) for pid in left] + [child.stderr.read().decode()[-3000:]]
    if sig == signal.SIGKILL:
        for leftover in host.tmpdir.iterdir():
            subprocess.run(["rm", "-rf", str(leftover)], check=True, timeout=30)
    host.assert_untouched()


# ---------------------------------------------------------------- items 3 and 4: --env and secrets


SECRET = "tok-0123456789-abcdef-SECRET"
SCRIPT_SECRET = "sk-script-own-9876543210"


def test_secret_values_are_masked_everywhere_in_the_report(host, capsys):
    """A value given with --env to a secret-named variable, and one the script sets itself, never
    appear: not in the "cannot be expressed" rows, not in the set -x tail."""
    script = host.script(f"""\
        set -x
        export OPENAI_API_KEY={SCRIPT_SECRET}
        echo "token is $HF_TOKEN and $OPENAI_API_KEY"
        curl -H "Authorization: Bearer $HF_TOKEN" https://example.invalid
        touch "/data/$HF_TOKEN"
        python3 convert.py --key "$HF_TOKEN" --other "$OPENAI_API_KEY"
        echo x > ~/"$HF_TOKEN"
    """)
    code, out = _import(script, capsys, "--env", f"HF_TOKEN={SECRET}")
    assert code == 2, out
    assert SECRET not in out and SCRIPT_SECRET not in out
    assert out.count("<redacted>") >= 5, out
    assert "Authorization: Bearer <redacted>" in out
    host.assert_untouched()


def test_secret_given_with_env_is_masked_in_a_full_report(host, capsys):
    """The same through an import that gets as far as the report (a submit, parity, rows)."""
    script = host.script(f"""\
        set -x
        source "$(dirname "$0")/models/qwen3-4B.sh"
        echo "$WANDB_API_KEY $MY_PASSWORD"
        pdsh -w node1 "export WANDB_API_KEY=$WANDB_API_KEY"
        ray start --head --num-gpus 8
        ray job submit --address=http://127.0.0.1:8265 -- python3 train.py --actor-num-nodes 1 \\
           --actor-num-gpus-per-node 8 --colocate ${{MODEL_ARGS[@]}} --hf-checkpoint /data/Qwen3-4B \\
           --wandb-key "$WANDB_API_KEY"
    """)
    code, out = _import(script, capsys, "--env", f"WANDB_API_KEY={SECRET}", "--env", "MY_PASSWORD=pw-1234567890")
    assert code == 1, out
    assert "parity: NOT the same run" in out
    assert SECRET not in out and "pw-1234567890" not in out
    assert "pdsh -w node1 export WANDB_API_KEY=<redacted>" in out
    host.assert_untouched()
