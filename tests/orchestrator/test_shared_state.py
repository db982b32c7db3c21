"""Two clients on one state directory (two processes of one user, or a service and a CLI)."""

from __future__ import annotations

import socket
import tempfile

from pomona import SandboxClient
from pomona.orchestrator.runtimes.local import LocalRuntime


def test_second_client_adopts_a_gateway_sandbox_the_first_still_serves():
    state = tempfile.mkdtemp(prefix="pomona-shared-")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    try:
        with SandboxClient("local", state_dir=state) as first:
            sb = first.create_sandbox("host", network="gateway", gateway=f"127.0.0.1:{port}")
            with SandboxClient("local", state_dir=state, auto_cleanup=False) as second:
                assert sb.id in {s.id for s in second.list_sandboxes()}
                assert second.get_sandbox(sb.id).exec("echo shared").stdout == "shared\n"
            assert sb.exec("echo still-first").stdout == "still-first\n"
    finally:
        server.close()
        LocalRuntime(state).unmount_store()
