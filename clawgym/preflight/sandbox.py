"""Sandbox checks: the Docker engine and gateway image, leftover containers, the chroot rootfs.

The docker SDK is imported inside the functions that talk to the engine, and only for
``sandbox.backend=docker``: the chroot backend never imports it nor contacts an engine.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from clawgym.preflight.core import FAILED, CheckFailed, CheckResult, Context, PreflightError, Report, plain_config

#: Seconds the Docker API may take per call before the engine counts as unreachable.
DOCKER_TIMEOUT = 20

#: Device nodes ClawGym-RL's build_rootfs.sh creates under <rootfs>/dev: name -> (major, minor).
ROOTFS_DEVICES: Dict[str, tuple] = {
    "null": (1, 3), "zero": (1, 5), "full": (1, 7), "random": (1, 8), "urandom": (1, 9), "tty": (5, 0),
}

#: The PATH the rollout sets inside the chroot (where ``node`` must be found).
CHROOT_PATH = ["usr/local/sbin", "usr/local/bin", "usr/sbin", "usr/bin", "sbin", "bin"]


# ---------------------------------------------------------------- docker

def engine_address() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def docker_client() -> Any:
    """A docker SDK client for the engine of this machine (DOCKER_HOST honoured); raises CheckFailed."""
    try:
        import docker
    except ImportError:
        raise CheckFailed("the docker Python package is not installed",
                          "pip install 'docker>=7' (clawgym talks to the engine through the docker SDK)")
    try:
        client = docker.from_env(timeout=DOCKER_TIMEOUT)
        client.ping()
        return client
    except Exception as exc:  # DockerException, connection errors: all mean "not reachable"
        raise CheckFailed(
            f"the Docker engine at {engine_address()} is not reachable ({_short(exc)})",
            "start the engine (systemctl start docker, or dockerd), make its socket accessible to this user "
            "(or set DOCKER_HOST), or use the chroot sandbox: sandbox=chroot sandbox.rootfs=/path/to/rootfs")


def _client(ctx: Context) -> Any:
    if ctx.docker_client is None:
        ctx.docker_client = docker_client()
    return ctx.docker_client


def _short(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_docker(ctx: Context) -> str:
    """The Docker engine answers (docker SDK; DOCKER_HOST honoured)."""
    client = _client(ctx)
    try:
        version = client.version().get("Version", "?")
    except Exception:
        version = "?"
    where = "" if ctx.local_head else \
        f" (the job runs on the cluster at {ctx.plan.address}: its node needs the same image)"
    return f"engine {version} at {engine_address()}{where}"


def normalize_image(ref: str) -> str:
    """Image reference as the engine stores it: implicit registry dropped, implicit :latest added."""
    ref = ref.strip()
    for implicit in ("docker.io/library/", "docker.io/", "index.docker.io/library/"):
        if ref.startswith(implicit):
            ref = ref[len(implicit):]
            break
    last = ref.rsplit("/", 1)[-1]
    if "@" not in last and ":" not in last:
        ref += ":latest"
    return ref


def check_image(ctx: Context) -> str:
    """The gateway image (sandbox.image) exists on the engine; no pull is attempted."""
    sb = ctx.c["sandbox"]
    image = sb["image"]
    client = _client(ctx)
    import docker.errors

    try:
        found = client.images.get(image)
    except docker.errors.ImageNotFound:
        root = ctx.c["paths"]["root"]
        raise CheckFailed(
            f"sandbox.image={image} is not on the Docker engine at {engine_address()}",
            f"build it from the ClawGym-RL checkout: docker build -t {image} {root} "
            f"(the gateway image is ghcr.io/openclaw/openclaw plus ClawGym-RL's pip packages), "
            f"or load a saved copy: docker load -i <file>.tar (then docker tag <id> {image}); "
            f"or set sandbox.image to an image you have (docker images)")
    except Exception as exc:
        raise CheckFailed(f"could not look up sandbox.image={image}: {_short(exc)}",
                          "check the image reference (repository:tag) and the engine")
    try:
        leftovers = find_leftovers(client, sb["container_prefix"], image)
    except Exception as exc:
        raise CheckFailed(f"could not list the engine's containers: {_short(exc)}",
                          "check the engine (docker ps -a must work for this user)")
    owned = [item for item in leftovers if owner_of(item, sb["container_prefix"], image) is not None]
    action = ("removed before launch" if sb["cleanup_leftovers"]
              else "kept: sandbox.cleanup_leftovers=false")
    short_id = found.id.split(":", 1)[-1][:12]
    kept = f"; {len(owned)} more of running launches, kept" if owned else ""
    return (f"{image} ({short_id}); {len(leftovers) - len(owned)} leftover {sb['container_prefix']}* container(s) "
            f"({action}){kept}")


def find_leftovers(client: Any, prefix: str, image: str) -> List[Dict[str, Any]]:
    """Containers (any state) whose name starts with ``prefix`` and that run ``image``.

    A container counts as the image's when its configured image reference is ``image``
    or its image id is the id ``image`` has now (so containers of an earlier build of
    the same tag count too). Nothing is removed here.
    """
    import docker.errors

    want = normalize_image(image)
    try:
        image_id: Optional[str] = client.images.get(image).id
    except docker.errors.ImageNotFound:
        image_id = None
    out = []
    for entry in client.api.containers(all=True):
        names = [n.lstrip("/") for n in entry.get("Names") or []]
        name = next((n for n in names if n.startswith(prefix)), None)
        if name is None:
            continue
        listed = entry.get("Image") or ""
        matches = entry.get("ImageID") == image_id and image_id is not None
        matches = matches or (not listed.startswith("sha256:") and normalize_image(listed) == want)
        if not matches:
            # The listing shows an id when the tag moved on; the configured reference tells.
            try:
                configured = client.api.inspect_container(entry["Id"])["Config"]["Image"]
            except docker.errors.NotFound:
                continue
            matches = normalize_image(configured) == want
        if matches:
            from clawgym.common.ownership import LAUNCH_LABEL

            out.append({"id": entry["Id"], "name": name, "state": entry.get("State", "?"), "image": listed,
                        "launch": (entry.get("Labels") or {}).get(LAUNCH_LABEL, "")})
    return out


def owner_of(item: Dict[str, Any], prefix: str, image: str) -> Optional[str]:
    """Who still owns a leftover container (None: its launch has ended, it may be removed).

    A container labelled with a launch (``io.clawgym.launch.rayjob``) belongs to that launch while it
    is live (clawgym.common.ownership: its launcher runs, or a job it submitted does); an unlabelled one
    to every live launch whose jobs run containers of this prefix and image on this engine."""
    from clawgym.common import ownership

    mine = ownership.current()
    if item.get("launch"):
        if mine is not None and item["launch"] == mine.id:
            return "this launch"
        if ownership.launch_ended(item["launch"]):
            return None
        rec = next((r for r in ownership.launches() if r.id == item["launch"]), None)
        return rec.describe() if rec is not None else f"launch {item['launch']}"
    owners = ownership.sandbox_owners(engine_address(), prefix, image)
    return "; ".join(r.describe() for r in owners) or None


def cleanup_leftovers(cfg: Any, *, echo: Optional[Callable[[str], None]] = print) -> List[str]:
    """Remove leftover gateway containers of an earlier run; return their names.

    Only containers whose name starts with ``sandbox.container_prefix`` AND whose image
    is ``sandbox.image`` AND whose launch has ended (:func:`owner_of`: the launch named by
    its ``io.clawgym.launch.rayjob`` label, or for an unlabelled one every live launch using that
    prefix and image) are removed (force, also when running); every other container
    is left alone. Each removal is printed as it happens. Any failure (engine
    unreachable, a container that cannot be removed) raises :class:`PreflightError`
    naming what failed, after trying the rest. The chroot backend contacts no engine.
    """
    c = plain_config(cfg)
    sb = c["sandbox"]
    say = echo or (lambda _line: None)
    if sb["backend"] != "docker":
        return []
    if not sb["cleanup_leftovers"]:
        say("leftover containers: not removed (sandbox.cleanup_leftovers=false)")
        return []
    # Its refusals are named "leftovers": skip_checks=[leftovers] skips it like any check.
    if "leftovers" in [str(x) for x in c.get("skip_checks") or []]:
        say("leftover containers: not removed (skip_checks=[leftovers])")
        return []
    skip_hint = "skip_checks=[leftovers] (or sandbox.cleanup_leftovers=false) launches without the cleanup"
    prefix, image = sb["container_prefix"], sb["image"]
    title = f"remove leftover {prefix}* containers of {image}"
    try:
        client = docker_client()
    except CheckFailed as exc:
        raise PreflightError(Report([CheckResult("leftovers", title, FAILED, exc.problem, f"{exc.fix}; or {skip_hint}")],
                                    heading="leftover cleanup"))
    import docker.errors

    removed: List[str] = []
    failures: List[str] = []
    try:
        try:
            leftovers = find_leftovers(client, prefix, image)
        except Exception as exc:
            failures.append(f"listing containers failed: {_short(exc)}")
            leftovers = []
        for item in leftovers:
            short = item["id"][:12]
            owner = owner_of(item, prefix, image)
            if owner is not None:
                # Another launch's sandbox (it may be running a rollout now): never removed.
                say(f"kept container {item['name']} ({short}, {item['state']}): it belongs to {owner}")
                continue
            try:
                client.api.remove_container(item["id"], force=True, v=True)
            except docker.errors.NotFound:
                say(f"leftover container {item['name']} ({short}) was already gone")
                continue
            except Exception as exc:
                failures.append(f"{item['name']} ({short}, {item['state']}): {_short(exc)}")
                say(f"could not remove leftover container {item['name']} ({short}): {_short(exc)}")
                continue
            removed.append(item["name"])
            say(f"removed leftover container {item['name']} ({short}, was {item['state']})")
    finally:
        client.close()
    if failures:
        raise PreflightError(Report([CheckResult(
            "leftovers", title, FAILED,
            f"{len(failures)} leftover container(s) could not be removed: " + "; ".join(failures),
            "remove them by hand (docker rm -f <name>) and retry, or launch with skip_checks=[leftovers] "
            "(or sandbox.cleanup_leftovers=false) if they belong to a run that is still going")], heading="leftover cleanup"))
    if not removed and not leftovers:
        say(f"no leftover {prefix}* containers of {image}")
    return removed


# ---------------------------------------------------------------- chroot

def resolve_in_root(root: Path, rel: str, max_links: int = 40) -> Optional[Path]:
    """``rel`` inside ``root`` with symlinks followed as a chroot would (absolute ones from root).

    None when a component is missing or links loop.
    """
    parts = [p for p in rel.split("/") if p and p != "."]
    resolved: List[str] = []
    links = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            if resolved:
                resolved.pop()
            continue
        candidate = root.joinpath(*resolved, part)
        if candidate.is_symlink():
            links += 1
            if links > max_links:
                return None
            target = os.readlink(candidate)
            if target.startswith("/"):
                resolved = []
            parts = [p for p in target.split("/") if p and p != "."] + parts
            continue
        if not os.path.lexists(candidate):
            return None
        resolved.append(part)
    return root.joinpath(*resolved)


def check_rootfs(ctx: Context) -> str:
    """sandbox.rootfs looks like an OpenClaw rootfs that ClawGym-RL's rollout can run.

    Required, because the rollout uses each of them:
      - ``app/dist/index.js``: the gateway entry (``cd /app && node dist/index.js gateway``);
      - ``node`` on the PATH the rollout sets (usr/local/sbin ... bin) and ``bin/bash``
        (the gateway and the reward script are started with ``/bin/bash -c``);
      - the character devices build_rootfs.sh makes with mknod: dev/null (1,3), dev/zero (1,5),
        dev/full (1,7), dev/random (1,8), dev/urandom (1,9), dev/tty (5,0); the chroot has
        no devtmpfs, so tools inside fail without them;
      - the same filesystem as /tmp: every task hard-links the rootfs into
        /tmp/clawgym-rl-<rollout>-<task>/rootfs (``cp -al``), which cannot cross filesystems.
    All problems are reported at once.
    """
    raw = ctx.c["sandbox"]["rootfs"]
    fix_build = ("build it as root with ClawGym-RL's build_rootfs.sh <rootfs> from an unpacked OpenClaw image "
                 "(skopeo copy docker://ghcr.io/openclaw/openclaw:<tag> oci:... && umoci unpack), "
                 "or set sandbox.rootfs to such a rootfs")
    if not raw:
        raise CheckFailed("sandbox.rootfs is not set", "set sandbox.rootfs=/path/to/openclaw/rootfs")
    root = Path(raw)
    if not root.is_dir():
        raise CheckFailed(f"sandbox.rootfs={raw} does not exist or is not a directory", fix_build)
    problems: List[str] = []
    entry = resolve_in_root(root, "app/dist/index.js")
    if entry is None or not entry.is_file():
        problems.append("no gateway entry app/dist/index.js")
    bash = resolve_in_root(root, "bin/bash")
    if bash is None or not bash.is_file():
        problems.append("no bin/bash")
    if not any((p := resolve_in_root(root, f"{d}/node")) is not None and p.is_file() for d in CHROOT_PATH):
        problems.append("no node binary on the chroot PATH (" + ", ".join("/" + d for d in CHROOT_PATH) + ")")
    bad_devs = []
    for name, (major, minor) in ROOTFS_DEVICES.items():
        path = root / "dev" / name
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            bad_devs.append(f"dev/{name} missing")
            continue
        if not stat.S_ISCHR(st.st_mode):
            bad_devs.append(f"dev/{name} is not a character device")
        elif (os.major(st.st_rdev), os.minor(st.st_rdev)) != (major, minor):
            bad_devs.append(f"dev/{name} is ({os.major(st.st_rdev)},{os.minor(st.st_rdev)}), "
                            f"not ({major},{minor})")
    problems += bad_devs
    if problems:
        fix = fix_build
        if bad_devs and len(bad_devs) == len(problems):
            fix = f"create the device nodes as root: build_rootfs.sh {raw} (mknod -m 666 <rootfs>/dev/null c 1 3, ...)"
        raise CheckFailed(f"sandbox.rootfs={raw} is not an OpenClaw rootfs: " + "; ".join(problems), fix)
    tmp_dev = os.stat("/tmp").st_dev
    if os.stat(root).st_dev != tmp_dev:
        raise CheckFailed(
            f"sandbox.rootfs={raw} is on another filesystem than /tmp; the rollout hard-links it into "
            "/tmp/clawgym-rl-<rollout>-<task>/ (cp -al), which fails across filesystems",
            "move or copy the rootfs onto the filesystem that holds /tmp and point sandbox.rootfs there")
    return f"{raw}: app/dist/index.js, node, bin/bash, dev/{{{','.join(ROOTFS_DEVICES)}}}"


def _userns_state() -> str:
    bits = [f"uid {os.getuid()}"]
    for path in ("/proc/sys/user/max_user_namespaces", "/proc/sys/kernel/unprivileged_userns_clone",
                 "/proc/sys/kernel/apparmor_restrict_unprivileged_userns"):
        try:
            bits.append(f"{path.split('/proc/sys/', 1)[1].replace('/', '.')}={Path(path).read_text().strip()}")
        except OSError:
            pass
    return ", ".join(bits)


def _run(argv: List[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)


def check_root(ctx: Context) -> str:
    """The rollout can enter the rootfs the way it does: ``unshare --user --map-root-user -- chroot``.

    ClawGym-RL starts every gateway and reward script in a user namespace (even as root),
    so user namespaces must work for this user; the check then really enters the rootfs
    and runs ``/bin/bash`` there, which proves it is a usable chroot target.
    """
    rootfs = ctx.c["sandbox"]["rootfs"]
    for tool in ("unshare", "chroot"):
        if shutil.which(tool) is None:
            raise CheckFailed(f"{tool} is not on PATH; the rollout runs gateways with unshare + chroot",
                              "install util-linux and coreutils (apt-get install util-linux coreutils)")
    try:
        probe = _run(["unshare", "--user", "--map-root-user", "--", "true"])
    except subprocess.TimeoutExpired:
        raise CheckFailed("unshare --user --map-root-user did not finish within 30 s", "check the host's unshare")
    if probe.returncode != 0:
        raise CheckFailed(
            f"user namespaces are not usable ({_userns_state()}): unshare --user --map-root-user true failed: "
            f"{_short(probe.stderr) or 'exit ' + str(probe.returncode)}; the rollout starts each gateway with it",
            "enable user namespaces (sysctl -w user.max_user_namespaces=15000; on Debian/Ubuntu also "
            "kernel.unprivileged_userns_clone=1 and kernel.apparmor_restrict_unprivileged_userns=0), or, inside a "
            "container, allow unshare (e.g. --security-opt seccomp=unconfined); or use sandbox=docker")
    try:
        enter = _run(["unshare", "--user", "--map-root-user", "--", "chroot", str(rootfs),
                      "/bin/bash", "-c", "cd /app && test -f dist/index.js"])
    except subprocess.TimeoutExpired:
        raise CheckFailed(f"entering sandbox.rootfs={rootfs} did not finish within 30 s",
                          "check that the rootfs's /bin/bash runs")
    if enter.returncode != 0:
        raise CheckFailed(
            f"could not run /bin/bash inside sandbox.rootfs={rootfs} with unshare + chroot: "
            f"{_short(enter.stderr) or 'exit ' + str(enter.returncode)}",
            "make sure the rootfs's /bin/bash and its libraries are complete (re-unpack the OpenClaw image and "
            "run build_rootfs.sh), or set sandbox.rootfs to a working rootfs")
    who = "root" if os.getuid() == 0 else f"uid {os.getuid()}"
    return f"running as {who}; user namespaces work; entered {rootfs} and ran /bin/bash"
