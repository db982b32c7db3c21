"""Commands in a sandbox's pod, through the pods/exec subresource with the gate (gate.py) in
front: exec and terminals as the Runtime contract has them (streaming, exit codes, caps, stdin,
a timeout that SIGKILLs the command's process group through a second exec, never the pod), and
the whole-output helper commands of the gate's busybox that the files API and set-up run."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any

from pomona.errors import InvalidRequest, SandboxFailed
from pomona.orchestrator.linux.safefs import normalize
from pomona.orchestrator.runtimes import execution
from pomona.orchestrator.runtimes.kubernetes import gate
from pomona.orchestrator.runtimes.kubernetes.channels import ChannelStream, GatedCommand, PodPty
from pomona.orchestrator.runtimes.kubernetes.cluster import Cluster
from pomona.orchestrator.runtimes.kubernetes.pods import Live
from pomona.orchestrator.types import SANDBOX_HOME, SANDBOX_UID, ExecChunk, ExecRequest, ExecResult


@dataclass
class Done:
    """A helper command's exit code and whole output."""

    code: int
    out: bytes
    err: bytes


class Commands:
    """Commands in the pods of one cluster; `allow_root` says whether pods run as root (and
    the gate drops to the sandbox user) or as the sandbox user throughout."""

    def __init__(self, cluster: Cluster, allow_root: bool):
        self.cluster, self.allow_root = cluster, allow_root

    def _open(
        self, live: Live, argv: list[str], stdin: bytes | None = None, tty: bool = False
    ) -> ChannelStream:
        """An exec stream on the sandbox container (the connect itself runs in the stream's thread)."""
        from kubernetes.stream import stream

        def connect() -> Any:
            with self.cluster.stream_lock:
                return stream(
                    self.cluster.stream_core.connect_get_namespaced_pod_exec,
                    live.pod,
                    self.cluster.namespace,
                    container="sandbox",
                    command=argv,
                    stdin=tty or stdin is not None,
                    stdout=True,
                    stderr=not tty,
                    tty=tty,
                    binary=True,
                    _preload_content=False,
                )

        return ChannelStream(connect, stdin)

    async def _argv(self, live: Live, request: ExecRequest, user: str) -> list[str]:
        if isinstance(request.command, str):
            if live.shell is None:
                probe = await self.helper(live, ["test", "-x", "/bin/bash"])
                live.shell = "/bin/bash" if probe.code == 0 else "/bin/sh"
            command = [live.shell, *(["-l"] if request.login_shell else []), "-c", request.command]
        else:
            command = list(request.command)
        cwd = normalize(request.cwd or live.spec.workdir)
        env = {
            "HOME": "/root" if user == "root" else SANDBOX_HOME,
            "USER": user,
            "LOGNAME": user,
            "PWD": cwd,
            "LANG": "C.UTF-8",
            **request.env,
        }
        return [gate.BUSYBOX, "env", *(f"{k}={v}" for k, v in env.items()), *command]

    def _user(self, live: Live, request: ExecRequest) -> str:
        user = request.user or live.spec.user
        if user == "root" and not self.allow_root:
            raise InvalidRequest(
                "this kubernetes runtime runs sandboxes as non-root "
                "(allow_root=False): exec(user='root') is not possible"
            )
        return user

    def _switch(self, user: str) -> int | None:
        """The uid the gate must become for `user`; None when the pod already runs as it."""
        uid = 0 if user == "root" else SANDBOX_UID
        return None if uid == (0 if self.allow_root else SANDBOX_UID) else uid

    def _signaller(self, live: Live, exec_id: str, uid: int | None) -> Callable[[int], Any]:
        async def send(signum: int) -> None:
            await self.helper(live, gate.signal_argv(exec_id, signum, uid)[1:], raw=True)

        return send

    async def exec(
        self, live: Live, request: ExecRequest
    ) -> AsyncGenerator[ExecChunk | ExecResult, None]:
        user = self._user(live, request)
        exec_id, uid = secrets.token_hex(8), self._switch(user)
        data = request.stdin.encode() if request.stdin is not None else None
        argv = gate.exec_argv(
            exec_id,
            uid,
            normalize(request.cwd or live.spec.workdir),
            None if data is None else len(data),
            await self._argv(live, request, user),
        )
        stream = self._open(live, argv, data)
        send = self._signaller(live, exec_id, uid)
        command = GatedCommand(stream, lambda: send(9))
        async with contextlib.aclosing(
            execution.stream(command, stdin=None, timeout=request.timeout, cap=request.output_cap)
        ) as items:
            async for item in items:
                yield item

    async def open_pty(self, live: Live, request: ExecRequest, rows: int, cols: int) -> PodPty:
        user = self._user(live, request)
        exec_id, uid = secrets.token_hex(8), self._switch(user)
        argv = gate.pty_argv(
            exec_id,
            uid,
            normalize(request.cwd or live.spec.workdir),
            rows,
            cols,
            await self._argv(live, request, user),
        )
        stream = self._open(live, argv, tty=True)
        await asyncio.shield(stream.opened)
        return PodPty(stream, self._signaller(live, exec_id, uid))

    async def helper(
        self,
        live: Live,
        argv: list[str],
        stdin: bytes | None = None,
        raw: bool = False,
        timeout: float = 300,
    ) -> Done:
        """A file or housekeeping command as root (as the sandbox user when root is not allowed),
        through the gate's busybox: binary-safe output, whole."""
        argv = (
            [gate.BUSYBOX, *argv]
            if raw
            else gate.exec_argv(
                secrets.token_hex(8),
                None,
                "/",
                None if stdin is None else len(stdin),
                [gate.BUSYBOX, *argv],
            )
        )
        stream = self._open(live, argv, stdin)
        out, err = bytearray(), bytearray()
        try:
            async with asyncio.timeout(timeout):
                while True:
                    name, data = await stream.queue.get()
                    if data is None:
                        break
                    (out if name == "stdout" else err).extend(data)
                code = await stream.exited
        except TimeoutError:
            raise SandboxFailed(
                f"sandbox {live.id!r}: {argv[1:3]} did not finish in {timeout:g} s"
            ) from None
        finally:
            await stream.close()
        return Done(code, bytes(out), bytes(err))

    async def prepare(self, live: Live) -> None:
        """/tmp 1777, the workdir and $HOME owned by the sandbox user (a pod that runs as the
        sandbox user throughout has nothing to give it)."""
        if not self.allow_root:
            return
        script = (
            "chmod 1777 /tmp 2>/dev/null || { mkdir -p /tmp && chmod 1777 /tmp; }; "
            'mkdir -p "$1" "$2" && chown "$3:$3" "$1" "$2"'
        )
        done = await self.helper(
            live,
            [
                "sh",
                "-c",
                script,
                "setup",
                normalize(live.spec.workdir),
                SANDBOX_HOME,
                str(live.uid),
            ],
        )
        if done.code:
            raise SandboxFailed(
                f"could not prepare the sandbox's directories: {done.err.decode(errors='replace')}"
            )
