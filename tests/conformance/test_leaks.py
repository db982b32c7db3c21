"""Nothing leaks: a SIGKILLed owner's sandboxes are adopted or removed by the next process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

from pomona import SandboxClient

OWNER = textwrap.dedent("""
    import os, sys, time
    from pomona import SandboxClient
    client = SandboxClient(sys.argv[1], state_dir=sys.argv[2], auto_cleanup=False)
    client.start()
    ids = [client.create_sandbox(sys.argv[3], labels={"leak": "test"}).id for _ in range(3)]
    print(" ".join(ids), flush=True)
    time.sleep(600)
""")


def _host_state(runtime: str, ids: list[str]) -> list[str]:
    """What of these sandboxes still exists on the host: processes, mounts, cgroups, containers."""
    found = []
    if runtime == "local":
        mounts = open("/proc/self/mounts").read()
        found += [f"mount {i}" for i in ids if f"/{i}/" in mounts]
        for ctrl in ("memory", "pids", "cpu", ""):
            base = f"/sys/fs/cgroup/{ctrl}".rstrip("/")
            for root, dirs, _ in os.walk(base):
                found += [f"cgroup {root}/{d}" for d in dirs if d in ids]
                if root.count("/") > base.count("/") + 1:
                    dirs.clear()
        procs = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        found += [f"process {i}" for i in ids if i in procs]
    else:
        out = subprocess.run(
            ["docker", "ps", "-a", "--format", "{{.Labels}}"], capture_output=True, text=True
        ).stdout
        found += [f"container {i}" for i in ids if i in out]
    return found


def test_sigkilled_owner_leaves_nothing_behind(runtime_name, image, state_root):
    state = str(state_root / f"leak-{runtime_name}")
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, runtime_name, state, image], stdout=subprocess.PIPE, text=True
    )
    ids = owner.stdout.readline().split()
    assert len(ids) == 3
    os.kill(owner.pid, signal.SIGKILL)
    owner.wait()
    assert _host_state(runtime_name, ids), "the sandboxes should outlive their owner until adopted"
    with SandboxClient(runtime_name, state_dir=state) as successor:
        adopted = {s.id for s in successor.list_sandboxes({"leak": "test"})}
        assert adopted == set(ids)
        survivor = successor.get_sandbox(ids[0])
        assert survivor.exec("echo adopted").stdout == "adopted\n"
        for i in ids:
            successor.delete_sandbox(i)
    assert _host_state(runtime_name, ids) == []
    if runtime_name == "local":
        from pomona.orchestrator.runtimes.local import LocalRuntime

        LocalRuntime(state).unmount_store()
