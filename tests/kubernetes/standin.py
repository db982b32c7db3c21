"""A STAND-IN for a Kubernetes API server and kubelet, for tests on a machine where no control
plane can run. It serves exactly the calls the kubernetes runtime makes, over the real wire
protocols — REST JSON, and the `v4.channel.k8s.io` WebSocket subprotocol for pods/exec and
pods/portforward — so the official `kubernetes` client and the runtime run unchanged.

What it does like a kubelet, through the Docker engine (the container runtime under many
kubelets): each emptyDir is a fresh world-writable host directory; init containers run to
completion in order, with their volume mounts and securityContext; the `sandbox` container runs
with the pod's command, user, capabilities (drop ALL, add ...), no-new-privileges, seccomp
default, CPU and memory limits, working directory and env. Every Pod and NetworkPolicy it
receives is validated against the OpenAPI schema first, as the real API server would.

VolumeSnapshots are copies of the claim's directory, restored by copying back (a CSI driver's
job). What it does not: scheduling, NetworkPolicy enforcement (pods get no network at all),
sidecars other than `sandbox`, RBAC, watches, and the kubelet's user namespaces: `hostUsers:
false` is kept on the pod, as an API server with UserNamespacesSupport keeps it (or dropped, with
`user_namespaces = False`, as one with the feature gate off does), but its containers share the
Docker engine's user namespace, which cannot give one container a range of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import docker
from fastapi import FastAPI, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse

from pomona.orchestrator.linux.netns import open_connection_in
from pomona.orchestrator.types import parse_bytes
from tests.kubernetes.schema import validate

PROTOCOL = "v4.channel.k8s.io"
TRUE = {"true", "True", "1"}


def _status(code: int, reason: str, message: str) -> JSONResponse:
    return JSONResponse(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "reason": reason,
            "message": message,
            "code": code,
        },
        status_code=code,
    )


def _matches(labels: dict[str, str], selector: str | None) -> bool:
    for term in filter(None, (selector or "").split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = value


def _list(api_version: str, kind: str, objects: Any, selector: str | None) -> JSONResponse:
    items = [o for o in objects if _matches(o["metadata"].get("labels", {}), selector)]
    return JSONResponse({"apiVersion": api_version, "kind": kind, "metadata": {}, "items": items})


def _copy(source: Path, target: Path) -> None:
    """A volume's contents with owners, modes and links kept, as a CSI snapshot keeps them."""
    target.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-a", str(source), str(target)], check=True)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class StandIn:
    def __init__(self, namespace: str):
        self.namespace = namespace
        self.engine = docker.from_env()
        self.api = self.engine.api
        self.tag = uuid.uuid4().hex[:8]  # every container it starts carries this label
        self.root = Path(tempfile.mkdtemp(prefix="k8s-standin-"))
        self.pods: dict[str, dict[str, Any]] = {}
        self.containers: dict[str, str] = {}
        self.policies: dict[str, dict[str, Any]] = {}
        self.received: list[dict[str, Any]] = []  # every object created, for the tests to inspect
        self.versions = 0
        self.snapshots: dict[str, dict[str, Any]] = {}
        self.user_namespaces = True  # False: the API server drops hostUsers (feature gate off)
        self.app = self._routes()

    # -- pods ---------------------------------------------------------------------------------

    def _volume_dirs(self, pod: dict[str, Any]) -> dict[str, str]:
        """emptyDir: a fresh directory. A generic ephemeral volume: its claim's directory, filled
        from a VolumeSnapshot when the claim names one as its dataSource (a CSI restore)."""
        dirs = {}
        for volume in pod["spec"].get("volumes", []):
            path = self.root / pod["metadata"]["name"] / volume["name"]
            if "ephemeral" in volume:
                claim = volume["ephemeral"]["volumeClaimTemplate"]["spec"]
                source = claim.get("dataSource")
                if source:
                    _copy(self.root / "snapshots" / source["name"], path)
            elif "emptyDir" not in volume:
                raise ValueError(
                    f"the stand-in has emptyDir and ephemeral volumes only, not {volume}"
                )
            path.mkdir(parents=True, exist_ok=True)
            path.chmod(0o777)
            dirs[volume["name"]] = str(path)
        return dirs

    def create_snapshot(self, body: dict[str, Any]) -> JSONResponse:
        """A VolumeSnapshot: a copy of the claim's directory, ready at once."""
        name = body["metadata"]["name"]
        if name in self.snapshots:
            return _status(409, "AlreadyExists", f'volumesnapshots "{name}" already exists')
        claim = body["spec"]["source"]["persistentVolumeClaimName"]
        pod, _, volume = claim.rpartition("-")
        _copy(self.root / pod / volume, self.root / "snapshots" / name)
        body["status"] = {"readyToUse": True}
        self.snapshots[name] = body
        return JSONResponse(body, status_code=201)

    def _options(self, container: dict[str, Any], dirs: dict[str, str]) -> dict[str, Any]:
        ctx = container.get("securityContext", {})
        caps = ctx.get("capabilities", {})
        options: dict[str, Any] = {
            "image": container["image"],
            "command": container["command"],
            "labels": {"pomona-standin": self.tag},
            "volumes": {
                dirs[m["name"]]: {
                    "bind": m["mountPath"],
                    "mode": "ro" if m.get("readOnly") else "rw",
                }
                for m in container.get("volumeMounts", [])
            },
            "user": f"{ctx.get('runAsUser', 0)}:{ctx.get('runAsGroup', ctx.get('runAsUser', 0))}",
            "cap_drop": caps.get("drop", []),
            "cap_add": caps.get("add", []),
            "read_only": bool(ctx.get("readOnlyRootFilesystem")),
            "network_mode": "none",
            "environment": {e["name"]: e["value"] for e in container.get("env", [])},
        }
        if ctx.get("allowPrivilegeEscalation") is False:
            options["security_opt"] = ["no-new-privileges"]
        if container.get("workingDir"):
            options["working_dir"] = container["workingDir"]
        limits = container.get("resources", {}).get("limits", {})
        if "cpu" in limits:
            cpu = limits["cpu"]
            options["nano_cpus"] = (
                int(cpu[:-1]) * 10**6 if cpu.endswith("m") else int(float(cpu) * 10**9)
            )
        if "memory" in limits:
            options["mem_limit"] = options["memswap_limit"] = parse_bytes(limits["memory"])
        return options

    def create_pod(self, pod: dict[str, Any]) -> JSONResponse:
        validate(pod)
        name = pod["metadata"]["name"]
        if name in self.pods:
            return _status(409, "AlreadyExists", f'pods "{name}" already exists')
        self.received.append(pod)
        if not self.user_namespaces:
            pod["spec"].pop("hostUsers", None)
        pod["metadata"].update(
            uid=str(uuid.uuid4()),
            creationTimestamp=_now(),
            namespace=self.namespace,
            resourceVersion=self._version(),
        )
        self.pods[name] = pod
        dirs = self._volume_dirs(pod)
        pod["status"] = {"phase": "Pending", "initContainerStatuses": [], "containerStatuses": []}
        for container in pod["spec"].get("initContainers", []) + pod["spec"]["containers"][:1]:
            try:
                self.engine.images.get(container["image"])
            except docker.errors.ImageNotFound:  # nothing is pulled: no registry is reachable here
                pod["status"]["containerStatuses"] = [
                    {
                        "name": container["name"],
                        "ready": False,
                        "restartCount": 0,
                        "image": container["image"],
                        "imageID": "",
                        "state": {
                            "waiting": {
                                "reason": "ErrImageNeverPull",
                                "message": f"image {container['image']!r} is not present",
                            }
                        },
                    }
                ]
                return JSONResponse(pod, status_code=201)
        for init in pod["spec"].get("initContainers", []):
            out = self.engine.containers.run(**self._options(init, dirs), remove=False, detach=True)
            code = out.wait(timeout=120)["StatusCode"]
            logs = out.logs().decode(errors="replace")
            out.remove(force=True)
            pod["status"]["initContainerStatuses"].append(self._terminated(init, code, logs))
            if code:
                pod["status"]["phase"] = "Failed"
                return JSONResponse(pod, status_code=201)
        sandbox = pod["spec"]["containers"][0]
        created = self.engine.containers.run(
            **self._options(sandbox, dirs), hostname=pod["spec"].get("hostname"), detach=True
        )
        self.containers[name] = created.id
        return JSONResponse(pod, status_code=201)

    @staticmethod
    def _terminated(container: dict[str, Any], code: int, message: str) -> dict[str, Any]:
        return {
            "name": container["name"],
            "ready": False,
            "restartCount": 0,
            "image": container["image"],
            "imageID": "",
            "state": {
                "terminated": {
                    "exitCode": code,
                    "reason": "Completed" if code == 0 else "Error",
                    "message": message[-500:],
                }
            },
        }

    def _with_status(self, name: str) -> dict[str, Any]:
        pod = self.pods[name]
        container_id = self.containers.get(name)
        if container_id is None:
            return pod
        sandbox = pod["spec"]["containers"][0]
        state = self.api.inspect_container(container_id)["State"]
        if state["Running"]:
            pod["status"]["phase"] = "Running"
            pod["status"]["containerStatuses"] = [
                {
                    "name": "sandbox",
                    "ready": True,
                    "restartCount": 0,
                    "image": sandbox["image"],
                    "imageID": "",
                    "state": {"running": {"startedAt": _now()}},
                }
            ]
        else:
            pod["status"]["phase"] = "Failed"
            pod["status"]["containerStatuses"] = [
                self._terminated(sandbox, state["ExitCode"], state.get("Error", ""))
            ]
        return pod

    def _version(self) -> str:
        self.versions += 1
        return str(self.versions)

    def patch_pod(self, name: str, patch: dict[str, Any], content_type: str) -> JSONResponse:
        """A JSON merge patch (RFC 7386); a resourceVersion in it must match, as on a real server."""
        if name not in self.pods:
            return _status(404, "NotFound", f'pods "{name}" not found')
        if "merge-patch" not in content_type:
            return _status(
                415, "UnsupportedMediaType", f"the stand-in takes merge patches, not {content_type}"
            )
        pod = self.pods[name]
        wanted = patch.get("metadata", {}).pop("resourceVersion", None)
        if wanted is not None and wanted != pod["metadata"]["resourceVersion"]:
            return _status(409, "Conflict", f'pods "{name}": the object has been modified')
        _merge(pod, patch)
        validate({k: v for k, v in pod.items() if k != "status"})
        pod["metadata"]["resourceVersion"] = self._version()
        return JSONResponse(pod)

    def delete_pod(self, name: str, preconditions: dict[str, Any] | None = None) -> JSONResponse:
        if name not in self.pods:
            return _status(404, "NotFound", f'pods "{name}" not found')
        wanted = (preconditions or {}).get("resourceVersion")
        if wanted is not None and wanted != self.pods[name]["metadata"]["resourceVersion"]:
            return _status(409, "Conflict", f'pods "{name}": precondition failed')
        pod = self.pods.pop(name)
        container_id = self.containers.pop(name, None)
        if container_id:
            with contextlib.suppress(docker.errors.NotFound):
                self.api.remove_container(container_id, force=True)
        shutil.rmtree(self.root / name, ignore_errors=True)
        return JSONResponse(pod)

    def close(self) -> None:
        for container in self.engine.containers.list(
            all=True, filters={"label": f"pomona-standin={self.tag}"}
        ):
            container.remove(force=True)
        shutil.rmtree(self.root, ignore_errors=True)
        self.engine.close()

    # -- exec and port-forward ----------------------------------------------------------------

    async def exec(self, ws: WebSocket, name: str) -> None:
        query = ws.query_params
        argv, tty = query.getlist("command"), query.get("tty") in TRUE
        await ws.accept(subprotocol=PROTOCOL)
        loop = asyncio.get_running_loop()
        container = self.containers[name]
        exec_id = (
            await asyncio.to_thread(
                self.api.exec_create, container, argv, stdin=query.get("stdin") in TRUE, tty=tty
            )
        )["Id"]
        sock = await asyncio.to_thread(self.api.exec_start, exec_id, socket=True, tty=tty)
        raw = sock._sock
        finished = asyncio.Event()

        def pump() -> None:
            """Engine frames (8-byte header: stream, 0, 0, 0, size) or a raw tty stream, to channels."""
            try:
                buffer = b""
                while data := raw.recv(65536):
                    if tty:
                        asyncio.run_coroutine_threadsafe(
                            ws.send_bytes(b"\x01" + data), loop
                        ).result()
                        continue
                    buffer += data
                    while len(buffer) >= 8 and len(buffer) >= 8 + int.from_bytes(
                        buffer[4:8], "big"
                    ):
                        size = int.from_bytes(buffer[4:8], "big")
                        channel, payload, buffer = (
                            buffer[0],
                            buffer[8 : 8 + size],
                            buffer[8 + size :],
                        )
                        asyncio.run_coroutine_threadsafe(
                            ws.send_bytes(bytes([channel]) + payload), loop
                        ).result()
            except OSError:
                pass
            finally:
                loop.call_soon_threadsafe(finished.set)

        thread = threading.Thread(target=pump, daemon=True)
        thread.start()

        async def inbound() -> None:
            with contextlib.suppress(WebSocketDisconnect):
                while True:
                    message = await ws.receive_bytes()
                    if message[:1] == b"\x00":
                        await asyncio.to_thread(raw.sendall, message[1:])
                    elif message[:1] == b"\x04":
                        size = json.loads(message[1:])
                        await asyncio.to_thread(
                            self.api.exec_resize,
                            exec_id,
                            height=size["Height"],
                            width=size["Width"],
                        )

        reader = asyncio.create_task(inbound())
        await finished.wait()
        reader.cancel()
        while (info := await asyncio.to_thread(self.api.exec_inspect, exec_id))["Running"]:
            await asyncio.sleep(
                0.01
            )  # the engine ends the stream a moment before it records the exit
        code = info["ExitCode"]
        status = (
            {"metadata": {}, "status": "Success"}
            if code == 0
            else {
                "metadata": {},
                "status": "Failure",
                "reason": "NonZeroExitCode",
                "message": f"command terminated with non-zero exit code: {code}",
                "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
            }
        )
        with contextlib.suppress(Exception):
            await ws.send_bytes(b"\x03" + json.dumps(status).encode())
            await ws.close()
        raw.close()

    async def portforward(self, ws: WebSocket, name: str) -> None:
        port = int(ws.query_params["ports"])
        await ws.accept(subprotocol=PROTOCOL)
        header = port.to_bytes(2, "little")
        await ws.send_bytes(b"\x00" + header)
        await ws.send_bytes(b"\x01" + header)
        pid = self.api.inspect_container(self.containers[name])["State"]["Pid"]
        try:
            reader, writer = await open_connection_in(f"/proc/{pid}/ns/net", port)
        except OSError as e:
            await ws.send_bytes(b"\x01" + f"connection to port {port} refused: {e}".encode())
            await ws.close()
            return

        async def outbound() -> None:
            while data := await reader.read(65536):
                await ws.send_bytes(b"\x00" + data)
            await ws.close()

        task = asyncio.create_task(outbound())
        with contextlib.suppress(WebSocketDisconnect):
            while True:
                message = await ws.receive_bytes()
                if message[:1] == b"\x00":
                    writer.write(message[1:])
                    await writer.drain()
        task.cancel()
        writer.close()

    # -- routes -------------------------------------------------------------------------------

    def _routes(self) -> FastAPI:
        app = FastAPI()
        pods = "/api/v1/namespaces/{namespace}/pods"
        policies = "/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies"
        snapshots = "/apis/snapshot.storage.k8s.io/v1/namespaces/{namespace}/volumesnapshots"

        @app.post(snapshots)
        async def create_snapshot(namespace: str, request: Request) -> JSONResponse:
            return await asyncio.to_thread(self.create_snapshot, await request.json())

        @app.get(snapshots)
        async def list_snapshots(namespace: str, labelSelector: str | None = None) -> JSONResponse:  # noqa: N803
            return _list(
                "snapshot.storage.k8s.io/v1",
                "VolumeSnapshotList",
                self.snapshots.values(),
                labelSelector,
            )

        @app.get(snapshots + "/{name}")
        async def read_snapshot(namespace: str, name: str) -> JSONResponse:
            if name not in self.snapshots:
                return _status(404, "NotFound", f'volumesnapshots "{name}" not found')
            return JSONResponse(self.snapshots[name])

        @app.delete(snapshots + "/{name}")
        async def delete_snapshot(namespace: str, name: str) -> JSONResponse:
            if name not in self.snapshots:
                return _status(404, "NotFound", f'volumesnapshots "{name}" not found')
            shutil.rmtree(self.root / "snapshots" / name, ignore_errors=True)
            return JSONResponse(self.snapshots.pop(name))

        @app.get(pods)
        async def list_pods(namespace: str, labelSelector: str | None = None) -> JSONResponse:  # noqa: N803
            items = [
                await asyncio.to_thread(self._with_status, n)
                for n, p in list(self.pods.items())
                if _matches(p["metadata"].get("labels", {}), labelSelector)
            ]
            return JSONResponse(
                {"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": items}
            )

        @app.post(pods)
        async def create_pod(namespace: str, request: Request) -> JSONResponse:
            return await asyncio.to_thread(self.create_pod, await request.json())

        @app.get(pods + "/{name}")
        async def read_pod(namespace: str, name: str) -> JSONResponse:
            if name not in self.pods:
                return _status(404, "NotFound", f'pods "{name}" not found')
            return JSONResponse(await asyncio.to_thread(self._with_status, name))

        @app.delete(pods + "/{name}")
        async def delete_pod(namespace: str, name: str, request: Request) -> JSONResponse:
            body = await request.body()
            preconditions = json.loads(body).get("preconditions") if body else None
            return await asyncio.to_thread(self.delete_pod, name, preconditions)

        @app.patch(pods + "/{name}")
        async def patch_pod(namespace: str, name: str, request: Request) -> JSONResponse:
            return self.patch_pod(
                name, await request.json(), request.headers.get("content-type", "")
            )

        @app.websocket(pods + "/{name}/exec")
        async def exec_(ws: WebSocket, namespace: str, name: str) -> None:
            await self.exec(ws, name)

        @app.websocket(pods + "/{name}/portforward")
        async def portforward(ws: WebSocket, namespace: str, name: str) -> None:
            await self.portforward(ws, name)

        @app.get(policies)
        async def list_policies(namespace: str, labelSelector: str | None = None) -> JSONResponse:  # noqa: N803
            return _list(
                "networking.k8s.io/v1", "NetworkPolicyList", self.policies.values(), labelSelector
            )

        @app.post(policies)
        async def create_policy(namespace: str, request: Request) -> JSONResponse:
            policy = await request.json()
            validate(policy)
            name = policy["metadata"]["name"]
            if name in self.policies:
                return _status(409, "AlreadyExists", f'networkpolicies "{name}" already exists')
            self.received.append(policy)
            self.policies[name] = policy
            return JSONResponse(policy, status_code=201)

        @app.delete(policies + "/{name}")
        async def delete_policy(namespace: str, name: str) -> JSONResponse:
            if name not in self.policies:
                return _status(404, "NotFound", f'networkpolicies "{name}" not found')
            del self.policies[name]
            return JSONResponse(
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "status": "Success",
                    "metadata": {},
                    "details": {"name": name},
                }
            )

        return app


def gate_image() -> str:
    """The gate image the init container pulls: the orchestrator image's /pomona/gate/busybox,
    and nothing else (FROM scratch), built from this machine's static busybox."""
    image = "pomona-test/gate:1"
    engine = docker.from_env()
    try:
        engine.images.get(image)
    except docker.errors.ImageNotFound:
        with tempfile.TemporaryDirectory() as context:
            os.makedirs(f"{context}/pomona/gate")
            shutil.copy2("/bin/busybox", f"{context}/pomona/gate/busybox")
            Path(context, "Dockerfile").write_text("FROM scratch\nCOPY pomona /pomona\n")
            engine.images.build(path=context, tag=image, rm=True)
    finally:
        engine.close()
    return image


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running(namespace: str) -> Iterator[tuple[str, StandIn]]:
    import uvicorn

    standin = StandIn(namespace)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            standin.app, host="127.0.0.1", port=port, log_level="warning", ws="websockets-sansio"
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError("the stand-in did not start")
            time.sleep(0.01)
        yield f"http://127.0.0.1:{port}", standin
    finally:
        server.should_exit = True
        thread.join(30)
        standin.close()
