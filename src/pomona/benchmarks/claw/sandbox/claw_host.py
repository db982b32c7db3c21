"""The trusted side of one Claw-Eval episode, run as root inside its sandbox: what Claw-Eval's own
runner does on its host, with Claw-Eval's own code from the user's checkout (copied unchanged into
HOME/bench):

- its mock services (`mock_services/*/server.py`, started as its ServiceManager starts them: the
  task's command, its env, the checkout as working directory), each listening on a unix socket
  only root can open instead of 0.0.0.0:PORT (the one thing Pomona changes: where they listen);
- a gateway on their published ports (the tasks' `tool_endpoints` URLs, unchanged) that lets only
  root's connections through, which the kernel's socket table tells apart: the agent, another
  user in the same network namespace, can reach no service, reset it or read its audit;
- its sandbox server (`src/claw_eval/sandbox/server.py`, its app served in this process, from
  /workspace as its container's working directory) as root behind the same gateway, for the
  task's file injection and env snapshots;
- its ToolDispatcher for the agent's tool calls (the MCP relay brings them over HOME/tools.sock),
  each dispatch recorded here, out of the agent's reach;
- its UserAgent for multi-turn tasks (`ask_user`), and its agent loop (`run_task`, in a process
  of its own) for the native harness.

    claw_host.py --task-dir HOME/bench/tasks/ID [--user FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shlex
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # pomona-python runs with -I

from claw_common import (  # noqa: E402
    BENCH,
    BIN,
    CONTROL_SOCKET,
    READY,
    RUN,
    SNAPSHOT_PORT,
    TOOLS_SOCKET,
    peer_uid,
)

SHIM = """import os, runpy, sys, uvicorn
where = os.environ.pop("POMONA_CLAW_UDS")
serve = uvicorn.run
uvicorn.run = lambda app, *a, **k: serve(app, uds=where, log_level="warning")
script = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path[0] = os.path.dirname(os.path.abspath(script))
runpy.run_path(script, run_name="__main__")
"""
PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
FORBIDDEN = (
    b"HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nConnection: close\r\n"
    b'Content-Length: 71\r\n\r\n{"error": "the mock services answer Claw-Eval\'s own dispatcher only."}'
)


def spawn(name: str, argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start a server program of the checkout with its uvicorn.run pointed at RUN/NAME.sock."""
    if Path(argv[0]).name not in ("python", "python3"):
        raise SystemExit(f"service {name}: only Python services can run here ({argv[0]})")
    base = {k: v for k, v in os.environ.items() if k not in PROXY_VARS}
    full = {**base, **env, "POMONA_CLAW_UDS": str(RUN / f"{name}.sock")}
    log = (RUN / f"{name}.log").open("wb")
    return subprocess.Popen(
        [sys.executable, "-c", SHIM, *argv[1:]],
        cwd=cwd,
        env=full,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def _refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answer 403 once the request is read (closing on unread data would reset the
    connection, and the caller would see an error instead of the answer)."""
    with contextlib.suppress(Exception):
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        length = next(
            (
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            ),
            0,
        )
        await asyncio.wait_for(reader.readexactly(min(length, 1 << 20)), 10)
    writer.write(FORBIDDEN)
    with contextlib.suppress(ConnectionError, OSError):
        await writer.drain()
    writer.close()


async def gateway(port: int, target: Path) -> None:
    """Loopback PORT, for root only, forwarded to the unix socket `target`."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        local, peer = writer.get_extra_info("sockname"), writer.get_extra_info("peername")
        if peer_uid(local, peer) != 0:
            await _refuse(reader, writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(str(target))
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer))

    for host in ("127.0.0.1", "::1"):
        with contextlib.suppress(OSError):  # a sandbox without IPv6 has no ::1
            await asyncio.start_server(handle, host, port)


class Host:
    """The task, its running services and everything the agent side asks for."""

    def __init__(
        self, task_dir: Path, user: dict[str, Any] | None, processes: list[subprocess.Popen[bytes]]
    ):
        from claw_eval.models.task import TaskDefinition
        from claw_eval.runner.dispatcher import ToolDispatcher

        self.task_dir = task_dir
        self.task = TaskDefinition.from_yaml(task_dir / "task.yaml")
        self.dispatcher = ToolDispatcher(self.task.get_endpoint_map())
        self.trace_id = str(uuid.uuid4())
        self.dispatches: list[dict[str, Any]] = []
        self.calls = 0
        self.lock = threading.Lock()
        self.user = user
        self.user_turns: list[dict[str, Any]] = []
        self.user_agent: Any = None
        self.loop_traces: list[str] = []
        self.processes = processes

    def wait_ready(self, limit: float) -> None:
        """Claw-Eval's own health check on each service (through the gateway), given `limit`
        seconds in all: a loaded machine starts FastAPI slower than the tasks' ready_timeout."""
        import httpx
        from claw_eval.runner.services import ServiceManager

        probe = ServiceManager(self.task.services)
        deadline = time.monotonic() + limit
        pending = list(self.task.services)
        while pending or not _sandbox_server_up(httpx):
            for proc, svc in zip(self.processes, self.task.services, strict=True):
                if proc.poll() is not None:
                    log = (RUN / f"{svc.name}.log").read_text(errors="replace")[-1500:]
                    raise SystemExit(f"service {svc.name} exited ({proc.returncode}): {log}")
            pending = [s for s in pending if not probe._is_healthy(s)]
            if time.monotonic() > deadline:
                names = [s.name for s in pending] or ["sandbox server"]
                raise SystemExit(f"not ready after {limit:.0f} s: {', '.join(names)}")
            time.sleep(0.2)

    def tools(self) -> dict[str, Any]:
        ua = self.task.user_agent
        return {
            "tools": [t.model_dump() for t in self.task.tools],
            "ask_user": ua.system_prompt_suffix.strip() if ua.enabled else None,
        }

    def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """One tool call through Claw-Eval's ToolDispatcher, recorded as its ToolDispatch."""
        from claw_eval.models.content import ToolUseBlock

        with self.lock:
            self.calls += 1
            use = ToolUseBlock(id=f"pomona_{self.calls}", name=name, input=arguments)
        result, event = self.dispatcher.dispatch(use, self.trace_id)
        with self.lock:
            self.dispatches.append(event.model_dump(mode="json"))
        text = "\n".join(b.text for b in result.content)
        return {"text": text, "is_error": result.is_error}

    def ask_user(self, question: str) -> dict[str, Any]:
        """The simulated user's answer, by Claw-Eval's UserAgent on the conversation so far (the
        task's prompt, the agent's questions and the user's answers, as its loop keeps them)."""
        from claw_eval.models.message import Message

        ua = self.task.user_agent
        if not ua.enabled or self.user is None:
            return {"text": "There is no user to ask in this task.", "is_error": True}
        if len(self.user_turns) >= ua.max_rounds:
            return {"text": "(The user does not answer any more questions.)", "is_error": False}
        messages = [Message(role="user", content=self.task.prompt.text)]
        for turn in self.user_turns:
            messages.append(Message(role="assistant", content=turn["question"]))
            messages.append(Message(role="user", content=f"[user_agent]\n{turn['answer']}"))
        messages.append(Message(role="assistant", content=question))
        if self.user_agent is None:
            from claw_user import make_user

            self.user_agent = make_user(self.user)
        answer = self.user_agent.generate_response(
            persona=ua.persona, conversation_messages=messages
        )
        self.user_turns.append({"question": question, "answer": answer})
        if answer is None:
            return {"text": "(The user is satisfied and has nothing to add.)", "is_error": False}
        return {"text": answer, "is_error": False}

    def finish(self) -> dict[str, Any]:
        """The trial's evidence, once the agent is done (see claw_ctl.finish)."""
        from claw_ctl import finish
        from claw_user import close_all

        close_all()
        with self.lock:
            evidence = {
                "trace_id": self.trace_id,
                "dispatches": list(self.dispatches),
                "user_turns": list(self.user_turns),
                "loop_traces": list(self.loop_traces),
            }
        return finish(self.task_dir, evidence)

    def loop_argv(self, request: dict[str, Any]) -> list[str]:
        """The native loop's command line: Claw-Eval's run_task in a root process of its own."""
        argv = [
            sys.executable,
            str(BIN / "claw_loop.py"),
            "--task-dir",
            str(self.task_dir),
            "--model",
            str(request["model"]),
            "--base-url",
            str(request["base_url"]),
            "--sandbox-url",
            str(request["sandbox_url"]),
            "--trace-dir",
            str(RUN / "traces"),
        ]
        if self.user is not None and self.task.user_agent.enabled:
            argv += ["--user", json.dumps(self.user)]
        return argv


def _sandbox_server_up(httpx: Any) -> bool:
    try:
        with httpx.Client(trust_env=False, timeout=2.0) as client:
            return client.get(f"http://127.0.0.1:{SNAPSHOT_PORT}/health").status_code == 200
    except Exception:  # noqa: BLE001 - not up yet
        return False


async def _reply(writer: asyncio.StreamWriter, value: Any) -> None:
    writer.write(json.dumps(value, ensure_ascii=False).encode() + b"\n")
    await writer.drain()


async def run_loop(host: Host, request: dict[str, Any], writer: asyncio.StreamWriter) -> None:
    """Run the native loop, streaming its output; it is stopped if the launcher goes away."""
    proc = await asyncio.create_subprocess_exec(
        *host.loop_argv(request),
        cwd=str(RUN),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        stdin=asyncio.subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    try:
        while line := await proc.stdout.readline():
            text = line.decode(errors="replace").rstrip("\n")
            if text.startswith('{"pomona_final"'):
                final = json.loads(text)
                host.loop_traces.append(final["trace"])
                await _reply(writer, {"final": final["pomona_final"]})
            else:
                await _reply(writer, {"log": text})
        await proc.wait()
        await _reply(writer, {"exit": proc.returncode})
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def serve_tools(host: Host) -> None:
    """The agent side's socket: anyone in the sandbox may list and call the task's tools, ask
    the user, or start the native loop; nothing else."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = json.loads(await reader.readline() or b"{}")
            op = request.get("op")
            if op == "tools":
                await _reply(writer, host.tools())
            elif op == "call":
                args = request.get("input") if isinstance(request.get("input"), dict) else {}
                name = str(request.get("name") or "")
                await _reply(writer, await asyncio.to_thread(host.call, name, args))
            elif op == "ask_user":
                question = str(request.get("question") or "")
                await _reply(writer, await asyncio.to_thread(host.ask_user, question))
            elif op == "loop":
                await run_loop(host, request, writer)
            else:
                await _reply(writer, {"error": f"unknown op {op!r}"})
        except (ConnectionError, OSError, ValueError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    TOOLS_SOCKET.unlink(missing_ok=True)
    await asyncio.start_unix_server(handle, str(TOOLS_SOCKET))
    TOOLS_SOCKET.chmod(0o666)


async def serve_control(host: Host) -> None:
    """Root's socket (RUN is 0700): what the episode's evidence is made of."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = json.loads(await reader.readline() or b"{}")
        if request.get("op") == "finish":
            try:
                await _reply(writer, await asyncio.to_thread(host.finish))
            except Exception as e:  # noqa: BLE001 - said to the caller, which types it
                await _reply(writer, {"error": f"{type(e).__name__}: {e}"})
        writer.close()

    await asyncio.start_unix_server(handle, str(CONTROL_SOCKET))


async def main_async(host: Host, limit: float) -> None:
    ports = {svc.port: RUN / f"{svc.name}.sock" for svc in host.task.services}
    ports[SNAPSHOT_PORT] = RUN / "sandbox.sock"
    for port, target in ports.items():
        await gateway(port, target)
    await serve_sandbox_server()
    await asyncio.to_thread(host.wait_ready, limit)
    from claw_ctl import inject

    placed = await asyncio.to_thread(inject, host.task_dir, "sandbox")
    if placed["injected"] < placed["expected"]:
        raise SystemExit(f"only {placed['injected']} of {placed['expected']} task files placed")
    (RUN / "traces").mkdir(exist_ok=True)
    await serve_tools(host)
    await serve_control(host)
    READY.write_text(
        json.dumps({"pid": os.getpid(), "services": [s.name for s in host.task.services]})
    )
    await asyncio.Event().wait()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--task-dir", type=Path, required=True)
    p.add_argument("--user", type=Path, help="the simulated user: {model, proxy, script?}")
    p.add_argument("--ready-within", type=float, default=120.0)
    args = p.parse_args(argv)
    processes = start_services(args.task_dir)
    try:
        sys.path.insert(0, str(BENCH / "src"))
        user = json.loads(args.user.read_text()) if args.user else None
        asyncio.run(main_async(Host(args.task_dir, user, processes), args.ready_within))
    finally:
        for proc in processes:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, 9)


def start_services(task_dir: Path) -> list[subprocess.Popen[bytes]]:
    """The task's services and root's sandbox server, started first (they take the longest),
    from the task file as data; Claw-Eval's own TaskDefinition reads it right after."""
    import yaml

    raw = yaml.load((task_dir / "task.yaml").read_text(), Loader=yaml.CSafeLoader)
    out = []
    for svc in raw.get("services") or []:
        env = {str(k): str(v) for k, v in (svc.get("env") or {}).items()}
        out.append(spawn(svc["name"], shlex.split(svc["command"]), BENCH, env))
    return out


async def serve_sandbox_server() -> None:
    """Claw-Eval's sandbox server's app, as its __main__ serves it but on RUN/sandbox.sock."""
    import runpy

    import uvicorn

    module = runpy.run_path(str(BENCH / "src/claw_eval/sandbox/server.py"), run_name="sandbox")
    config = uvicorn.Config(module["app"], uds=str(RUN / "sandbox.sock"), log_level="warning")
    asyncio.get_running_loop().create_task(uvicorn.Server(config).serve())


if __name__ == "__main__":
    main()
