"""Root inside a `local` sandbox is nobody outside (issue 22): each attack of the issue, played
by root inside a sandbox (or a second sandbox), refused by the kernel's own checks because the
sandbox's ids 0-65535 are a host id range of its own (docs/security.md)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import textwrap
from pathlib import Path

from pomona import SandboxClient
from pomona.orchestrator.linux import seccomp
from pomona.orchestrator.linux.idranges import FIRST, SIZE
from pomona.orchestrator.types import SANDBOX_UID, Mount
from tests.conftest import SESSION, leftovers


def _runtime(client: SandboxClient):  # the in-process runtime behind the client
    return client._async._runtime


def test_each_sandbox_has_a_host_id_range_of_its_own(local_client):
    with (
        local_client.create_sandbox("host", user="root") as a,
        local_client.create_sandbox("host", user="root") as b,
    ):
        maps = [
            sb.exec("cat /proc/self/uid_map /proc/self/gid_map").stdout.split() for sb in (a, b)
        ]
        for words in maps:
            assert words[0::3] == ["0", "0"] and words[2::3] == ["65536", "65536"]
            assert words[1] == words[4] and int(words[1]) >= FIRST
        assert maps[0][1] != maps[1][1]
        runtime = _runtime(local_client)
        init = runtime.sandboxes[a.id].record.init_pid
        uid = os.stat(f"/proc/{init}").st_uid  # as the host sees the sandbox's root
        assert uid == int(maps[0][1]) and (uid - FIRST) % SIZE == 0


def test_root_inside_cannot_write_host_sysctls(local_client):
    """kernel.core_pattern with a pipe makes the kernel run a program as host root: the write
    (of the value already there, so a broken boundary changes nothing) must fail."""
    with local_client.create_sandbox("host", user="root") as sb:
        result = sb.exec(
            "for f in kernel/core_pattern vm/drop_caches kernel/hostname net/ipv4/ip_forward; do "
            "v=$(cat /proc/sys/$f 2>/dev/null); "
            "if printf '%s\\n' \"$v\" > /proc/sys/$f 2>/dev/null; then echo WROTE $f; fi; done; "
            "echo done"
        )
    assert result.stdout.strip().splitlines() == ["done"], result.stdout


NAMESPACE_LINKS = ("user", "mnt", "uts", "ipc", "net", "pid")


def test_the_seccomp_program_cannot_be_rewritten_between_fork_and_exec(local_client):
    """Root inside stops each pomona-enter child the moment it appears (the next pid is
    predictable) and tries to reopen the filter's memfd through /proc/PID/fd for writing: the
    child is not dumpable and holds no descriptor of ours, and the memfd is sealed."""
    attacker = textwrap.dedent("""
        import json, os, signal, struct, time
        allow_all = struct.pack("HBBI", 0x06, 0, 0, 0x7FFF0000)  # BPF_RET|BPF_K, SECCOMP_RET_ALLOW
        seen = {"stopped": 0, "links": [], "opened": []}
        end = time.time() + 120
        while not os.path.exists("/tmp/stop") and time.time() < end:
            target = int(open("/proc/sys/kernel/ns_last_pid").read()) + 1
            while time.time() < end and not os.path.exists("/tmp/stop"):
                try:
                    os.kill(target, signal.SIGSTOP)
                    break
                except ProcessLookupError:
                    if int(open("/proc/sys/kernel/ns_last_pid").read()) >= target:
                        break  # it came and went: predict again
            else:
                break
            try:
                seen["stopped"] += 1
                for fd in os.listdir(f"/proc/{target}/fd"):
                    path = f"/proc/{target}/fd/{fd}"
                    seen["links"].append(os.readlink(path))
                    if "seccomp" in seen["links"][-1]:
                        with open(path, "r+b") as f:
                            f.write(allow_all * 64)
                        seen["opened"].append(path)
            except OSError:
                pass
            finally:
                try:
                    os.kill(target, signal.SIGCONT)
                except ProcessLookupError:
                    pass
        open("/tmp/seen.json", "w").write(json.dumps(seen))
    """)
    with local_client.create_sandbox("host", user="root") as a:
        a.write_file("/tmp/attack.py", attacker.encode())
        a.exec("python3 /tmp/attack.py > /dev/null 2>&1 &", user="root")
        for _ in range(30):
            assert a.exec(["true"], timeout=60).exit_code == 0
        a.exec("touch /tmp/stop")
        for _ in range(100):
            if a.exec("test -e /tmp/seen.json").exit_code == 0:
                break
        seen = json.loads(a.read_file("/tmp/seen.json"))
        assert seen["stopped"] >= 1, seen  # the attack ran: it caught commands on their way in
        assert seen["opened"] == [], seen
        ours = [x for x in seen["links"] if "memfd" in x or x.split(":")[0] in NAMESPACE_LINKS]
        assert ours == [], seen  # no namespace descriptor of the orchestrator's either
        with local_client.create_sandbox("host", user="root") as b:
            probe = b.exec("grep '^Seccomp:' /proc/self/status; unshare -U true && echo ESCAPED")
        assert probe.stdout.split() == ["Seccomp:", "2"], probe.stdout
    seals = fcntl.fcntl(seccomp.shared_fd(), fcntl.F_GET_SEALS)
    assert seals & fcntl.F_SEAL_WRITE and seals & fcntl.F_SEAL_SEAL


NODES = ("null", "zero", "full", "random", "urandom", "tty")


def test_root_inside_cannot_reach_the_hosts_device_nodes(local_client):
    """The sandbox's /dev holds nodes of its own: none is the host's node (a bind mount of it
    shows the host's device and inode), so chmod 000 /dev/null inside leaves the host's alone;
    and no new device node can be made."""
    host = {n: os.stat(f"/dev/{n}") for n in NODES}
    with local_client.create_sandbox("host", user="root") as sb:
        seen = sb.exec(" ".join(["stat -c '%n %d %i'", *(f"/dev/{n}" for n in NODES)])).stdout
        for line in seen.splitlines():
            name, dev, ino = line.split()
            st = host[name.removeprefix("/dev/")]
            assert (int(dev), int(ino)) != (st.st_dev, st.st_ino), f"{name} is the host's node"
        changed = sb.exec("chmod 000 /dev/null /dev/zero /dev/urandom && echo changed")
        assert changed.stdout.strip() == "changed"  # its own nodes: harmless
        made = sb.exec("mknod /tmp/vda b 254 0 && echo MADE; mknod /tmp/mem c 1 1 && echo MADE")
        assert "MADE" not in made.stdout
    assert {n: os.stat(f"/dev/{n}").st_mode for n in NODES} == {
        n: st.st_mode for n, st in host.items()
    }


def test_writes_to_the_inits_output_never_land_outside_the_quota(local_client):
    """The init's stdout and stderr are no file in the store: root inside cannot open them
    through /proc/1/fd, and nothing outside the sandbox's capped disk grows."""
    with local_client.create_sandbox("host", user="root", disk="16Mi") as sb:
        result = sb.exec(
            "for fd in 0 1 2 3 4; do head -c 8M /dev/zero > /proc/1/fd/$fd 2>/dev/null "
            "&& echo WROTE $fd; done; echo done",
            timeout=120,
        )
        directory = _runtime(local_client).sandboxes[sb.id].dir
        sizes = {p.name: p.stat().st_size for p in directory.rglob("*") if p.is_file()}
    assert result.stdout.strip() == "done", result.stdout
    assert all(size < 2**20 for name, size in sizes.items() if name != "disk.img"), sizes


def test_a_sandbox_made_without_limits_writes_only_to_a_disk_of_its_own(local_client):
    """No limits asked for: the sandbox still gets the default disk (10 GiB, or the store's
    size), an image of its own, so what root inside writes never lands in the shared store,
    which every other sandbox writes to."""
    with local_client.create_sandbox("host", user="root") as sb:
        limit = sb.info.spec.limits.disk
        result = sb.exec(
            "head -c 8M /dev/zero > /root/blob && df -B1 --output=size / | tail -1", timeout=120
        )
        directory = _runtime(local_client).sandboxes[sb.id].dir
        sizes = {p.name: p.stat().st_size for p in directory.rglob("*") if p.is_file()}
    assert limit and limit <= 10 * 2**30
    assert result.exit_code == 0, result.stderr
    assert 0.9 * limit < int(result.stdout) <= limit  # the disk the sandbox sees is that size
    assert "disk.img" in sizes
    assert all(size < 2**20 for name, size in sizes.items() if name != "disk.img"), sizes


def _host_processes_of(uid: int) -> int:
    count = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            status = Path(f"/proc/{pid}/status").read_text()
            count += status.split("Uid:")[1].split()[0] == str(uid)
    return count


FORKS = textwrap.dedent("""
    import os
    children = [os.fork() or os._exit(0) for _ in range(10)]
    for child in children:
        os.waitpid(child, 0)
    print("forked")
""")


def test_a_sandboxs_processes_count_against_no_host_users_limit(local_client):
    """The host's uid 1000 is a real user here. A sandbox runs 100 processes as its uid 1000;
    that user, under a process limit 60 above what it runs already, still forks: the sandbox's
    1000 is a host id of its own range, so RLIMIT_NPROC never counts its processes for the host's
    user (nor for another sandbox's)."""
    import resource
    import subprocess

    with local_client.create_sandbox("host") as sb:
        sb.exec("for i in $(seq 100); do sleep 300 > /dev/null 2>&1 & done")
        limit = _host_processes_of(SANDBOX_UID) + 60

        def as_host_user() -> None:
            os.setgroups([])
            os.setgid(SANDBOX_UID)
            os.setuid(SANDBOX_UID)
            resource.setrlimit(resource.RLIMIT_NPROC, (limit, limit))

        done = subprocess.run(
            ["/usr/bin/python3", "-c", FORKS],
            preexec_fn=as_host_user,
            capture_output=True,
            text=True,
        )
    assert done.stdout.strip() == "forked", done.stderr


def test_root_inside_cannot_change_host_files_on_a_writable_mount(local_client, tmp_path):
    """A host directory mounted read-write (an operator's choice): root inside cannot change the
    host root's files in it, and what it creates there is owned by its own host id, so a setuid
    binary it leaves is no root shell for the host."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    (shared / "host.txt").write_text("host\n")
    mount = Mount(source=str(shared), target="/mnt/shared", read_only=False)
    with local_client.create_sandbox("host", user="root", mounts=[mount]) as sb:
        result = sb.exec(
            "cd /mnt/shared; echo pwned > host.txt; chmod 777 host.txt; chown 0:0 host.txt; "
            "cp /bin/true setuid && chmod 4755 setuid; echo done"
        )
    assert result.stdout.strip().endswith("done"), result.stderr
    assert (shared / "host.txt").read_text() == "host\n"
    assert (shared / "host.txt").stat().st_mode & 0o777 == 0o644
    made = (shared / "setuid").stat()
    assert made.st_uid >= FIRST, "root inside created a file owned by the host's root"


def test_root_inside_cannot_read_another_state_directory(local_client):
    """A `host`-image sandbox sees the host's root filesystem. A state directory made after it
    (so no mask of its hides it) holds every sandbox of that directory in its store image; it is
    owned by an id no sandbox maps, so root inside cannot open it."""
    other = Path(f"/var/lib/pomona-test-{SESSION}-other")
    with local_client.create_sandbox("host", user="root") as attacker:
        try:
            with (
                SandboxClient("local", state_dir=str(other)) as victim_client,
                victim_client.create_sandbox("host") as victim,
            ):
                victim.write_file("/workspace/secret.txt", b"the victim's secret")
                seen = attacker.exec(
                    f"ls {other} && echo LISTED; head -c 512 {other}/store.xfs > /dev/null "
                    f"&& echo READ; grep -c 'the victim' {other}/store.xfs"
                )
            assert "LISTED" not in seen.stdout and "READ" not in seen.stdout, seen.stdout
            assert "Permission denied" in seen.stderr, seen.stderr
        finally:
            from pomona.orchestrator.runtimes.local import LocalRuntime

            LocalRuntime(other).unmount_store()
            shutil.rmtree(other, ignore_errors=True)
    assert leftovers([str(other)]) == []
