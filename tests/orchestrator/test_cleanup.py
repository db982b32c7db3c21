"""Nothing left behind: a client never closed is cleaned up at interpreter exit, errors at close
are reported, a clean close releases the store, and `pomona gc` releases what a SIGKILLed owner
left. The session-end leak check's own finder is what these tests assert with, so they also show
that it sees a leak when there is one."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

from pomona import SandboxClient
from pomona.cli import main as pomona
from pomona.errors import SandboxFailed
from tests.conftest import leftovers

OWNER = textwrap.dedent("""
    import os, signal, sys
    from pomona import SandboxClient
    client = SandboxClient("local", state_dir=sys.argv[1])
    sandbox = client.create_sandbox("host")
    sandbox.exec("echo busy > /workspace/file")
    print(sandbox.id, flush=True)
    if sys.argv[2] == "exit":
        sys.exit(3)  # never closed: the interpreter's exit must clean up
    if sys.argv[2] == "raise":
        raise RuntimeError("an error nobody caught")
    os.kill(os.getpid(), signal.SIGKILL)  # no cleanup can run: gc's work
""")


def _owner(state: str, how: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", OWNER, state, how], capture_output=True, text=True)


@pytest.mark.parametrize("how", ["exit", "raise"])
def test_a_client_never_closed_is_cleaned_up_at_exit(how):
    state = tempfile.mkdtemp(prefix="cleanup-exit-")
    done = _owner(state, how)
    assert done.stdout.strip().startswith("sb-"), done.stderr
    assert "closing a SandboxClient at exit failed" not in done.stderr
    assert leftovers([state]) == []


def test_gc_releases_what_a_killed_owner_left(capsys):
    state = tempfile.mkdtemp(prefix="cleanup-gc-")
    done = _owner(state, "kill")
    assert done.returncode == -9
    left = leftovers([state])
    assert any(item.startswith("mount") for item in left) and any(
        item.startswith("cgroup")
        for item in left  # with the sandbox's init in it
    )
    assert pomona(["gc", "--state-dir", state]) == 0
    assert "released" in capsys.readouterr().out
    assert leftovers([state]) == []


CUT_OFF = textwrap.dedent("""
    import os, signal, subprocess, sys
    from pomona import SandboxClient
    from pomona.orchestrator.runtimes.local import build

    class Dies(subprocess.Popen):
        # dies as pomona-init starts, before it reads the init's report: the init then waits
        # for a go-ahead that never comes
        def __init__(self, args, **kwargs):
            if args[0] != "pomona-init":
                return super().__init__(args, **kwargs)
            real = kwargs.pop("executable")
            super().__init__(["sh", "-c", 'sleep 1; exec "$0"', real], **kwargs)
            print(self.pid, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    build.subprocess.Popen = Dies
    SandboxClient("local", state_dir=sys.argv[1]).create_sandbox("host")
""")


def test_a_create_cut_off_mid_spawn_leaves_nothing_running():
    state = tempfile.mkdtemp(prefix="cleanup-spawn-")
    cut = subprocess.run([sys.executable, "-c", CUT_OFF, state], capture_output=True, text=True)
    assert cut.returncode == -9, cut.stderr
    started = int(cut.stdout.split()[0])  # pomona-init's parent, behind a 1 s delay
    for _ in range(600):  # the init sees its go-ahead pipe closed and exits, and its parent
        if not os.path.exists(f"/proc/{started}"):
            break
        time.sleep(0.1)
    assert not os.path.exists(f"/proc/{started}")
    with SandboxClient("local", state_dir=state) as client:  # removes the half-made sandbox
        assert client.list_sandboxes() == []
    assert leftovers([state]) == []


def test_gc_leaves_what_a_live_process_owns():
    state = tempfile.mkdtemp(prefix="cleanup-live-")
    with SandboxClient("local", state_dir=state) as client:
        sandbox = client.create_sandbox("host")
        assert pomona(["gc", "--state-dir", state]) == 0
        assert sandbox.exec("echo alive").stdout == "alive\n"
    assert leftovers([state]) == []  # and the clean close released the store


def test_errors_at_close_are_reported_not_swallowed():
    state = tempfile.mkdtemp(prefix="cleanup-errors-")
    client = SandboxClient("local", state_dir=state)
    sandbox = client.create_sandbox("host")
    service = client._async._service
    real_delete = service.delete

    async def failing_delete(sandbox_id: str) -> bool:
        raise OSError(5, "the disk went away")

    service.delete = failing_delete
    with pytest.raises(SandboxFailed, match=f"delete {sandbox.id}.*the disk went away"):
        client.close()
    service.delete = real_delete
    with SandboxClient("local", state_dir=state) as again:
        assert again.delete_sandbox(sandbox.id) is True
    assert leftovers([state]) == []
    assert os.path.isdir(state)
