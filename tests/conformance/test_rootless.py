"""The local runtime as an ordinary user (issue 29): no root, no loop mount, the user's
subordinate ids (runtimes/local/rootless.py).

As root, the test makes the user once (useradd gives it 65,536 subordinate ids; the user stays,
as the image caches do, so the layers it unpacked are reused by the next run), an image archive
it may read (the suite's Debian image, from the engine), and runs conformance tests as that user
(setpriv) in a pytest of its own: by default the ones that show each difference from root's
runtime; with POMONA_TEST_ROOTLESS=full every local test of FILES (minutes). Then nothing of
the user's may be left: no process with its uid or subordinate ids, and its temporary directory
removable by the user itself (nothing in it owned by a sandbox's id). The interpreter is this
one; where it lives under a directory the user may not enter (pyenv under /root), a private
mount namespace shows the user that one subtree and nothing else of it.

The tests below the first run in that inner pytest, as the user.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from pomona.errors import InvalidRequest, RuntimeUnavailable
from tests.conftest import SESSION, docker_available

USER = "pomona-rootless"
AS_ROOT = os.geteuid() == 0
# what an ordinary user's runtime does the same as root's (leaks, the state dir, Podman and the
# probe of host internals need root, or other runtimes)
FILES = [
    "test_rootless.py",
    "test_lifecycle.py",
    "test_exec.py",
    "test_files.py",
    "test_patch.py",
    "test_pty.py",
    "test_snapshot_fork.py",
    "test_isolation.py",
    "test_limits.py",
    "test_interrupt.py",
]
# by default: what differs (refusals, rlimits for pids and memory, a tmpfs disk, no idmapping:
# files owned by their users inside, root inside kept from host files), and a fork; the full
# fork bomb (30 s) runs with the rest under POMONA_TEST_ROOTLESS=full
QUICK_FILES = ["test_rootless.py", "test_limits.py", "test_isolation.py", "test_snapshot_fork.py"]
QUICK = "rootless or memory_hog or disk_filler or cpu_limit or host_private_files or fork_branches"
IMAGE_ARCHIVE = Path("/var/cache/pomona/images/debian-bookworm-docker.tar")
NO_SUCH_USER = 54321  # a throwaway uid: no passwd entry, no subordinate ids


def _user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "-m", "-s", "/bin/sh", USER], check=True)
        return pwd.getpwnam(USER)


def _subordinate(user: pwd.struct_passwd) -> range:
    for line in Path("/etc/subuid").read_text().splitlines():
        name, start, count = line.split(":")
        if name == user.pw_name:
            return range(int(start), int(start) + int(count))
    raise AssertionError(f"useradd gave {user.pw_name} no subordinate ids")


def _image_archive() -> Path:
    """The suite's Debian image as a `docker save` archive any user may read (cached)."""
    from tests.images import debian_image

    if not IMAGE_ARCHIVE.exists():
        staged = IMAGE_ARCHIVE.with_suffix(f".{os.getpid()}.tmp")
        subprocess.run(["docker", "save", "-o", str(staged), debian_image()], check=True)
        staged.chmod(0o644)
        staged.replace(IMAGE_ARCHIVE)
    return IMAGE_ARCHIVE


def _reachable(executable: str) -> list[str]:
    """Shell lines that, in a private mount namespace, let any user reach `executable`: for the
    first directory on its path that others may not enter, that directory becomes an empty
    tmpfs holding only the one entry on the way, bound back from where it was."""
    path = Path(os.path.realpath(executable))
    for parent in reversed(path.parents):
        if parent != Path("/") and not parent.stat().st_mode & 0o001:
            child = path.relative_to(parent).parts[0]
            keep = tempfile.mkdtemp(prefix="rootless-keep-")
            return [
                f"mount --bind {parent / child} {keep}",
                f"mount -t tmpfs -o mode=755 tmpfs {parent}",
                f"mkdir {parent / child}",
                f"mount --bind {keep} {parent / child}",
            ]
    return []


def _run_as(
    uid: int, gid: int, env: dict[str, str], argv: list[str]
) -> subprocess.CompletedProcess:
    repo = Path(__file__).resolve().parents[2]
    script = " && ".join(
        [
            *_reachable(sys.executable),
            f'cd {repo} && exec setpriv --reuid {uid} --regid {gid} --clear-groups "$@"',
        ]
    )
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", **env}
    environment = [f"{k}={v}" for k, v in env.items()]
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", script, "sh", "env", "-i", *environment, *argv],
        capture_output=True,
        text=True,
        timeout=3000,
    )


def _left_by(ids: set[int]) -> list[str]:
    """Processes running as any of `ids` (real uid)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        uid = int(next(x for x in status.splitlines() if x.startswith("Uid:")).split()[1])
        if uid in ids:
            found.append(f"{pid} (uid {uid}): {cmdline.decode(errors='replace')}")
    return found


@pytest.mark.skipif(not AS_ROOT, reason="makes a user and runs the suite as it: runs as root")
def test_the_conformance_suite_passes_as_an_ordinary_user():
    if not shutil.which("newuidmap"):
        pytest.skip("newuidmap is missing (Debian package uidmap)")
    if not docker_available():
        pytest.skip("the suite's image comes from the Docker engine (./dev services)")
    user, archive = _user(), _image_archive()
    full = os.environ.get("POMONA_TEST_ROOTLESS") == "full"
    tmp = Path(f"/tmp/pomona-rootless-{SESSION}")
    tmp.mkdir(mode=0o700)
    os.chown(tmp, user.pw_uid, user.pw_gid)
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfEs"]
    argv += [f"tests/conformance/{f}" for f in (FILES if full else QUICK_FILES)]
    argv += ["-k", "local" if full else f"local and ({QUICK})"]
    env = {
        "HOME": user.pw_dir,
        "TMPDIR": str(tmp),
        "POMONA_TEST_SESSION": SESSION,  # what outlives the run is this session's leak
        "POMONA_TEST_LOCAL_IMAGE": f"docker-archive:{archive}",
    }
    try:
        done = _run_as(user.pw_uid, user.pw_gid, env, argv)
        assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
        assert " passed" in done.stdout and " failed" not in done.stdout
    finally:
        removed = _run_as(user.pw_uid, user.pw_gid, {}, ["rm", "-rf", str(tmp)])
    left = _left_by({user.pw_uid, *_subordinate(user)})
    assert not left, f"the user's runtime left processes behind: {left}"
    assert removed.returncode == 0 and not tmp.exists(), (
        f"the user cannot remove what its runtime left in {tmp}: {removed.stderr[-2000:]}"
    )


@pytest.mark.skipif(not AS_ROOT, reason="runs as a throwaway uid: runs as root")
def test_a_user_without_subordinate_ids_is_told_how_to_get_them():
    """No passwd entry, no /etc/subuid line: the runtime says what is missing and the command
    that gives it, in the caller's words, and starts nothing."""
    tmp = Path(tempfile.mkdtemp(prefix="pomona-rootless-nobody-", dir="/tmp"))
    tmp.chmod(0o777)
    code = (
        "from pomona import SandboxClient\n"
        "from pomona.errors import RuntimeUnavailable\n"
        "try:\n"
        f"    SandboxClient('local', state_dir='{tmp}/state').start()\n"
        "except RuntimeUnavailable as e:\n"
        "    print('REFUSED', e)\n"
    )
    try:
        argv = [sys.executable, "-c", code]
        done = _run_as(NO_SUCH_USER, NO_SUCH_USER, {"HOME": str(tmp)}, argv)
    finally:
        shutil.rmtree(tmp)
    assert done.stdout.startswith("REFUSED"), done.stdout + done.stderr
    assert "/etc/subuid" in done.stdout and "usermod --add-subuids A-B" in done.stdout
    assert not _left_by({NO_SUCH_USER})


# -- as the user, in the inner pytest ---------------------------------------------------------


@pytest.mark.skipif(AS_ROOT, reason="runs as an ordinary user (the test above runs it so)")
def test_rootless_refuses_in_words_what_it_cannot_hold(client, runtime_name, image):
    if runtime_name != "local":
        pytest.skip("the local runtime's rootless mode")
    with pytest.raises(InvalidRequest, match=r'image="host" needs the local runtime as root'):
        client.create_sandbox("host")
    with pytest.raises(InvalidRequest, match="limits.cpu needs a cgroup"):
        client.create_sandbox(image, cpu=0.5)
    with client.create_sandbox(image) as sb:
        # no idmapping, yet image files are owned by their users inside, and the ids inside
        # are the user's subordinate ones, never the user itself
        assert sb.exec("stat -c %u:%g /etc/passwd /root", user="root").stdout == "0:0\n0:0\n"
        assert sb.exec("cat /proc/self/uid_map").stdout.split() == ["0", "1", "65536"]
        assert sb.exec("touch /proc/sys/kernel/core_pattern", user="root").exit_code != 0
        assert sb.exec("chmod 000 /dev/null", user="root").exit_code != 0
    with client.create_sandbox(image, pids=40) as sb:  # pids: RLIMIT_NPROC, no cgroup
        sb.exec("i=0; while [ $i -lt 100 ]; do sleep 3 & i=$((i+1)); done", timeout=20)
        count = sb.exec("ps -e --no-headers | wc -l", timeout=20)
        assert count.exit_code == 0 and int(count.stdout) <= 40


@pytest.mark.skipif(AS_ROOT, reason="runs as an ordinary user")
def test_rootless_local_runtime_is_not_made_directly(tmp_path):
    """LocalRuntime itself needs root, or root of the user's namespace; as the user it says how
    to get there instead of failing in a mount."""
    from pomona.orchestrator.runtimes.local import LocalRuntime

    with pytest.raises(RuntimeUnavailable, match="SandboxClient"):
        LocalRuntime(tmp_path / "state")
