"""WebSocket sessions of the service: a terminal (Orchard's PTY frame protocol, reference/orchard.md
§2.4) and a raw TCP tunnel to a port inside a sandbox.

Every socket is accepted before it is closed, so clients always see the close code and reason
(Orchard loses them by closing before accept): 4400 bad init, 4401 no key, 4403 bad key,
4404 unknown sandbox, 4500 the command could not start, 4502 nothing listens on the port.
The key comes in the X-API-Key header or as the subprotocol `api_key.<key>`, never in the URL.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import signal
from collections.abc import Callable

from fastapi import WebSocket, WebSocketDisconnect
from pydantic import ValidationError

from pomona.errors import (
    AuthenticationRequired,
    InvalidRequest,
    PermissionDenied,
    PomonaError,
    SandboxNotFound,
)
from pomona.orchestrator.runtime import Pty
from pomona.orchestrator.server.coordinator import Coordinator, Principal
from pomona.orchestrator.types import ExecRequest

INIT_TIMEOUT = 10.0
SIGNALS = {
    "TERM": signal.SIGTERM,
    "KILL": signal.SIGKILL,
    "INT": signal.SIGINT,
    "HUP": signal.SIGHUP,
    "QUIT": signal.SIGQUIT,
}
Check = Callable[[str | None], Principal]


async def _accept(websocket: WebSocket, check: Check) -> Principal | None:
    """Accept, then authenticate: a refusal is a close code the client can read."""
    key = websocket.headers.get("x-api-key")
    offered = [
        p.strip()
        for p in websocket.headers.get("sec-websocket-protocol", "").split(",")
        if p.strip()
    ]
    chosen = next((p for p in offered if p.startswith("api_key.")), None)
    if key is None and chosen:
        key = chosen.removeprefix("api_key.")
    await websocket.accept(subprotocol=chosen)
    try:
        return check(key)
    except AuthenticationRequired as e:
        reason = str(e)
        if "api_key" in websocket.query_params:  # where Orchard's SDK puts it
            reason = (
                "keys in URLs end up in logs and are refused: send X-API-Key or the "
                "subprotocol api_key.<key>"
            )
        await websocket.close(4401, reason[:120])
    except PermissionDenied as e:
        await websocket.close(4403, str(e)[:120])
    return None


def _signal(value: object) -> int:
    if isinstance(value, int) and value in signal.valid_signals():
        return value
    return SIGNALS.get(str(value).upper().removeprefix("SIG"), signal.SIGTERM)


async def _fail(websocket: WebSocket, code: int, message: str) -> None:
    with contextlib.suppress(Exception):
        await websocket.send_json({"type": "error", "message": message})
        await websocket.close(code, message[:120])


async def pty_session(
    websocket: WebSocket, check: Check, coord: Coordinator, sandbox_id: str
) -> None:
    who = await _accept(websocket, check)
    if who is None:
        return
    try:
        init = json.loads(await asyncio.wait_for(websocket.receive_text(), INIT_TIMEOUT))
        if not isinstance(init, dict) or init.get("type") != "init":
            raise InvalidRequest('the first frame must be {"type": "init", "cmd": [...]}')
        request = ExecRequest(
            command=init.get("cmd") or "bash",
            cwd=init.get("cwd"),
            env=init.get("env") or {},
            login_shell=bool(init.get("login_shell")),
            user=init.get("user"),
            timeout=None,
        )
        rows, cols = int(init.get("rows") or 24), int(init.get("cols") or 80)
    except TimeoutError:
        return await _fail(websocket, 4400, "init timeout")
    except (ValueError, TypeError, ValidationError, KeyError) as e:
        return await _fail(websocket, 4400, f"malformed init: {e}")
    except WebSocketDisconnect:
        return
    try:
        pty = await coord.open_pty(await coord.sandbox(who, sandbox_id), request, rows, cols)
    except SandboxNotFound as e:
        return await _fail(websocket, 4404, str(e))
    except PomonaError as e:
        return await _fail(websocket, 4500, str(e))
    try:
        await websocket.send_json(
            {"type": "ready", "pid": getattr(getattr(pty, "proc", None), "pid", 0)}
        )
        output = asyncio.create_task(_pty_output(websocket, pty))
        commands = asyncio.create_task(_pty_input(websocket, pty))
        done, _ = await asyncio.wait({output, commands}, return_when=asyncio.FIRST_COMPLETED)
        for task in (output, commands):
            task.cancel()
        await asyncio.gather(output, commands, return_exceptions=True)
        if output in done and output.exception() is None:
            with contextlib.suppress(Exception):
                await websocket.close(1000)
    finally:
        await pty.close()


async def _pty_output(websocket: WebSocket, pty: Pty) -> None:
    while True:
        data = await pty.read(timeout=0.5)
        if data:
            await websocket.send_json({"type": "stdout", "data": base64.b64encode(data).decode()})
            continue
        code = await pty.wait(timeout=0.05)
        if code is not None:
            while data := await pty.read(timeout=0.05):  # what the terminal still holds
                await websocket.send_json(
                    {"type": "stdout", "data": base64.b64encode(data).decode()}
                )
            await websocket.send_json({"type": "exit", "code": code})
            return


async def _pty_input(websocket: WebSocket, pty: Pty) -> None:
    while True:
        try:
            frame = json.loads(await websocket.receive_text())
            kind = frame.get("type")
            if kind == "stdin":
                await pty.write(base64.b64decode(frame.get("data") or ""))
            elif kind == "resize":
                await pty.resize(int(frame["rows"]), int(frame["cols"]))
            elif kind == "signal":
                await pty.signal(_signal(frame.get("sig")))
            elif kind == "close":
                await pty.signal(signal.SIGTERM)
        except WebSocketDisconnect:
            return
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            await websocket.send_json(
                {"type": "error", "message": f"ignored a malformed frame: {e}"}
            )


async def tcp_tunnel(
    websocket: WebSocket, check: Check, coord: Coordinator, sandbox_id: str, port: int
) -> None:
    """A text frame {"type": "connected"}, then binary frames both ways (an empty one is a
    half-close); the socket closes when the sandbox side does."""
    who = await _accept(websocket, check)
    if who is None:
        return
    try:
        reader, writer = await coord.open_connection(await coord.sandbox(who, sandbox_id), port)
    except SandboxNotFound as e:
        return await _fail(websocket, 4404, str(e))
    except (PomonaError, OSError) as e:
        return await _fail(websocket, 4502, f"cannot connect to port {port} in {sandbox_id}: {e}")
    await websocket.send_json({"type": "connected", "port": port})  # then only binary frames

    async def upstream() -> None:
        with contextlib.suppress(WebSocketDisconnect):
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    return
                data = message.get("bytes") or (message.get("text") or "").encode()
                if not data:  # an empty frame is the client's half-close
                    writer.write_eof()
                    continue
                writer.write(data)
                await writer.drain()

    async def downstream() -> None:
        while data := await reader.read(65536):
            await websocket.send_bytes(data)

    tasks = {asyncio.create_task(upstream()), asyncio.create_task(downstream())}
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        writer.close()
        with contextlib.suppress(Exception):
            await websocket.close(1000)
