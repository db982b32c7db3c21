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


def test_the_orchestrator_environment_never_reaches_a_sandbox(local_client, monkeypatch):
    """Root inside can read every process's environment in its pid namespace, the init's too."""
    monkeypatch.setenv("POMONA_API_KEYS", "admin:orchestrator-secret-4242")
    with local_client.create_sandbox("host", user="root") as sb:
        result = sb.exec("cat /proc/[0-9]*/environ | tr '\\0' '\\n'; ls /proc/self/fd")
    assert "orchestrator-secret-4242" not in result.stdout
    assert sorted(result.stdout.split()[-4:]) == ["0", "1", "2", "3"]  # no fd of ours inside
    assert os.environ["POMONA_API_KEYS"] == "admin:orchestrator-secret-4242"


# Root inside with every capability of its user namespace and no seccomp filter: the host's
# Python joins the sandbox's namespaces the way pomona-enter does, becomes root inside, and
# skips the filter. Whatever it is refused now, the kernel refuses.
UNFILTERED_ROOT = textwrap.dedent("""
    import ctypes, errno, json, os, sys
    libc = ctypes.CDLL(None, use_errno=True)
    init = sys.argv[1]
    fds = {n: os.open(f"/proc/{init}/ns/{n}", os.O_RDONLY) for n in ("user", "mnt", "ipc", "uts", "pid")}
    root = os.open(f"/proc/{init}/root", os.O_RDONLY)
    for n in ("ipc", "uts", "pid", "mnt", "user"):
        if n == "user":
            os.fchdir(root); os.chroot(".")
        assert libc.setns(fds[n], 0) == 0, (n, ctypes.get_errno())
    os.setgroups([]); os.setresgid(0, 0, 0); os.setresuid(0, 0, 0)
    child = os.fork()  # into the sandbox's pid namespace, where its /proc/self is
    if child:
        sys.exit(os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]))
    def err(result):
        return "done" if result == 0 else errno.errorcode[ctypes.get_errno()]
    def attempt(call):
        try:
            call()
            return "done"
        except OSError as e:
            return errno.errorcode[e.errno]
    def write(path, data):
        with open(path, "w") as f:
            f.write(data)
    MS_REMOUNT, MS_BIND = 32, 4096
    print(json.dumps({
        "remount": [err(libc.mount(None, t.encode(), None, MS_REMOUNT | MS_BIND, None)) for t in sys.argv[2:]],
        "mount tmpfs": err(libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)),
        "umount /proc/sys": err(libc.umount2(b"/proc/sys", 2)),
        "core_pattern": attempt(lambda: write("/proc/sys/kernel/core_pattern", open("/proc/sys/kernel/core_pattern").read())),
        "sethostname": err(libc.sethostname(b"x", 1)),
        "mknod /dev/vda": attempt(lambda: os.mknod("/tmp/disk", 0o600 | 0o060000, os.makedev(254, 0))),
        "capabilities": open("/proc/self/status").read().split("CapEff:")[1].split()[0],
    }))
""")


def test_the_kernel_refuses_root_inside_even_without_the_filter(local_client, payload_dir):
    """Defence in depth: root with every capability of the sandbox's user namespace and no
    seccomp filter cannot remount a read-only mount writable, mount, unmount a mask, write a
    host sysctl, set the hostname or make a device node: the sandbox's mount, uts and pid
    namespaces belong to the host's user namespace, and root inside is an unprivileged host id."""
    import subprocess

    mount = Mount(source=str(payload_dir), target="/opt/pomona/tools")
    with local_client.create_sandbox("host", user="root", mounts=[mount]) as sb:
        init = local_client._async._runtime.sandboxes[sb.id].record.init_pid
        done = subprocess.run(
            ["python3", "-c", UNFILTERED_ROOT, str(init), "/opt/pomona/tools", "/proc/sys"],
            capture_output=True,
            text=True,
        )
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)
    assert int(outcome.pop("capabilities"), 16) != 0  # every capability of its own namespace
    assert outcome == {
        "remount": ["EPERM", "EPERM"],
        "mount tmpfs": "EPERM",
        "umount /proc/sys": "EPERM",
        "core_pattern": "EROFS",
        "sethostname": "EPERM",
        "mknod /dev/vda": "EPERM",
    }
    assert (payload_dir / "payload.txt").read_text() == "original payload\n"
