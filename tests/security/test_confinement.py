"""Root (and uid 1000) inside a sandbox against the host: read-only mounts, the exec gate, the
syscalls that reach kernel-global state, and the orchestrator's environment."""

from __future__ import annotations

import json
import os
import textwrap

import pytest

from pomona.orchestrator.types import Mount

REMOUNT_ATTACK = """
mount -o remount,rw,bind {target} 2>&1
mount -o remount,rw {target} 2>&1
umount -l {target} 2>&1
echo pwned > {target}/payload.txt 2>&1
cat {target}/payload.txt
"""

# Each syscall that reaches kernel-global state, called raw (libc wrappers may refuse first).
SYSCALL_PROBE = textwrap.dedent("""
    import ctypes, json
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    def call(number, *args):
        ctypes.set_errno(0)
        return 0 if libc.syscall(number, *args) >= 0 else ctypes.get_errno()
    buf = ctypes.create_string_buffer(64)
    print(json.dumps({
        "unshare(CLONE_NEWUSER)": call(272, 0x10000000),
        "unshare(CLONE_NEWNS)": call(272, 0x20000),
        "clone(CLONE_NEWUSER)": call(56, 0x10000000 | 17, 0, 0, 0, 0),
        "mount": call(165, b"none", b"/tmp", b"tmpfs", 0, None),
        "umount2": call(166, b"/proc", 2),
        "pivot_root": call(155, b"/", b"/"),
        "keyctl": call(250, 0, 0, 0, 0, 0),
        "add_key": call(248, b"user", b"k", b"v", 1, -4),
        "bpf": call(321, 0, buf, 64),
        "perf_event_open": call(298, buf, 0, -1, -1, 0),
        "init_module": call(175, buf, 1, b""),
        "kexec_load": call(246, 0, 0, 0, 0),
        "clock_settime": call(227, 0, buf),
        "settimeofday": call(164, buf, 0),
        "open_by_handle_at": call(304, 3, buf, 0),
        "userfaultfd": call(323, 0),
    }))
""")


@pytest.mark.parametrize("user", ["root", "pomona"])
def test_forbidden_syscalls_fail_for_any_user(local_client, user):
    with local_client.create_sandbox("host", user=user) as sb:
        result = sb.exec(["python3", "-c", SYSCALL_PROBE])
    assert result.exit_code == 0, result.stderr
    outcome = json.loads(result.stdout)
    allowed = {name: err for name, err in outcome.items() if err not in (1, 38)}  # EPERM, ENOSYS
    assert not allowed, f"these reached the kernel as {user}: {allowed}"


def test_nested_namespaces_cannot_be_made_with_the_tools_either(local_client):
    with local_client.create_sandbox("host", user="root") as sb:
        result = sb.exec("unshare -U -r id; unshare -m true; unshare -n true; echo done")
    assert result.stdout.strip() == "done"
    assert result.stderr.count("unshare failed") == 3, result.stderr


def test_every_process_of_a_sandbox_runs_under_the_filter(local_client):
    with local_client.create_sandbox("host") as sb:
        status = sb.exec("grep -h '^Seccomp:' /proc/1/status /proc/self/status").stdout.split()
        with sb.pty("grep '^Seccomp:' /proc/self/status") as terminal:
            terminal.wait(120)
            pty_status = terminal.read(5).decode()
    assert status == ["Seccomp:", "2", "Seccomp:", "2"]  # init and an exec: mode 2, a filter
    assert "Seccomp:\t2" in pty_status


@pytest.mark.parametrize("user", ["root", "pomona"])
def test_a_read_only_mount_stays_read_only_for_root(in_process, payload_dir, user):
    client, image = in_process
    mount = Mount(source=str(payload_dir), target="/opt/pomona/tools")
    with client.create_sandbox(image, user=user, mounts=[mount]) as sb:
        result = sb.exec(REMOUNT_ATTACK.format(target="/opt/pomona/tools"))
    assert (payload_dir / "payload.txt").read_text() == "original payload\n"
    assert "pwned" not in result.stdout


def test_the_exec_gate_cannot_be_remounted_writable(local_client):
    """The gate is the host's own busybox: a writable gate would be a writable host binary."""
    with local_client.create_sandbox("host", user="root") as sb:
        result = sb.exec(
            "mount -o remount,rw,bind /dev/.pomona/busybox 2>&1; "
            "grep ' /dev/.pomona/busybox ' /proc/self/mountinfo"
        )
    options = result.stdout.strip().splitlines()[-1].split()[5]
    assert options.split(",")[0] == "ro", result.stdout


def test_the_orchestrator_environment_never_reaches_a_sandbox(local_client, monkeypatch):
    """Root inside can read every process's environment in its pid namespace, the init's too."""
    monkeypatch.setenv("POMONA_API_KEYS", "admin:orchestrator-secret-4242")
    with local_client.create_sandbox("host", user="root") as sb:
        result = sb.exec("cat /proc/[0-9]*/environ | tr '\\0' '\\n'; ls /proc/self/fd")
    assert "orchestrator-secret-4242" not in result.stdout
    assert sorted(result.stdout.split()[-4:]) == ["0", "1", "2", "3"]  # no fd of ours inside
    assert os.environ["POMONA_API_KEYS"] == "admin:orchestrator-secret-4242"


REMOUNT_RAW = textwrap.dedent("""
    import ctypes, errno, sys
    libc = ctypes.CDLL(None, use_errno=True)
    MS_REMOUNT, MS_BIND = 32, 4096
    failed = libc.mount(None, sys.argv[1].encode(), None, MS_REMOUNT | MS_BIND, None) != 0
    print(errno.errorcode[ctypes.get_errno()] if failed else "REMOUNTED")
""")


def test_the_kernel_locks_read_only_mounts_even_without_the_filter(local_client, payload_dir):
    """Defence in depth: root with every capability of the sandbox's user namespace and no seccomp
    filter (this host's nsenter, not the sandbox's way in) still cannot remount read-write."""
    import subprocess

    mount = Mount(source=str(payload_dir), target="/opt/pomona/tools")
    with local_client.create_sandbox("host", user="root", mounts=[mount]) as sb:
        idle = local_client._async._runtime.sandboxes[sb.id].record.idle_pid
        for target in ("/opt/pomona/tools", "/dev/.pomona/busybox"):
            done = subprocess.run(
                [
                    "nsenter",
                    "-t",
                    str(idle),
                    "-U",
                    "-m",
                    "--",
                    "python3",
                    "-c",
                    REMOUNT_RAW,
                    target,
                ],
                capture_output=True,
                text=True,
            )
            assert done.stdout.strip() == "EPERM", (target, done.stdout, done.stderr)
    assert (payload_dir / "payload.txt").read_text() == "original payload\n"
