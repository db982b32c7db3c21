"""The native Claw-Eval harness's launcher, run by the harness runner as the agent's user: it
starts Claw-Eval's sandbox server (the loop's shell, file and media tools; its own code from the
checkout) as this user in /workspace and asks the trusted host to run Claw-Eval's agent loop
against it (the loop starts once the server answers), printing what the loop prints, ending
with {"type": "final", "text": ...}.

    claw_native.py --model M --base-url URL
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # pomona-python runs with -I

from claw_common import AGENT, AGENT_SANDBOX_PORT, TOOLS_SOCKET, stream  # noqa: E402


def start_sandbox_server() -> subprocess.Popen[bytes]:
    """Claw-Eval's sandbox server as this user; the loop waits until it answers."""
    return subprocess.Popen(
        [
            sys.executable,
            str(AGENT / "sandbox_server.py"),
            "--host",
            "127.0.0.1",
            "--port",
            str(AGENT_SANDBOX_PORT),
        ],
        cwd="/workspace",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", required=True)
    p.add_argument("--base-url", required=True)
    args = p.parse_args(argv)
    server = start_sandbox_server()
    code = 1
    try:
        message = {
            "op": "loop",
            "model": args.model,
            "base_url": args.base_url,
            "sandbox_url": f"http://127.0.0.1:{AGENT_SANDBOX_PORT}",
        }
        for event in stream(TOOLS_SOCKET, message, timeout=24 * 3600):
            if "log" in event:
                print(event["log"], flush=True)
            elif "final" in event:
                print(json.dumps({"type": "final", "text": event["final"]}), flush=True)
                code = 0
            elif "exit" in event and event["exit"] != 0:
                code = 1
    finally:
        server.terminate()
    return code


if __name__ == "__main__":
    sys.exit(main())
