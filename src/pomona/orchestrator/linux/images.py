"""OCI images as overlay layers: unpacked once into a shared cache, then stacked by every sandbox.

Sources, tried in this order for a reference:
  - an archive on disk: `docker-archive:/p.tar`, `oci-archive:/p.tar`, or any path ending in .tar
    (both `docker save` layouts and OCI image layouts are read);
  - the local Docker engine's (or Podman's Docker-compatible) image store;
  - a registry, over the OCI distribution API (`localhost:5000/name:tag`; plain HTTP is allowed for
    loopback registries, as Docker does).
Layers are keyed by their diff id (the sha256 of the uncompressed tar), so images that share
layers share them on disk. Whiteouts become overlayfs whiteouts and opaque directories.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx

from pomona import progress
from pomona.orchestrator.errors import ImageNotFound, InvalidRequest
from pomona.orchestrator.sources import ImageSources, archive_path, registry_host

REGISTRY_DEADLINE = 3600.0  # one layer's download
MANIFEST_TYPES = ", ".join([
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
])


@dataclass
class Image:
    ref: str
    layers: list[str]  # overlay lowerdirs, topmost first
    env: dict[str, str] = field(default_factory=dict)


def _env(config: dict) -> dict[str, str]:
    pairs = (config.get("config") or {}).get("Env") or []
    return dict(p.split("=", 1) for p in pairs if "=" in p)


class ImageStore:
    def __init__(self, root: str | os.PathLike, docker_url: str | None = None,
                 sources: ImageSources | None = None):
        self.root = Path(root)
        self.docker_url = docker_url
        self.sources = sources or ImageSources()
        self._locks: dict[str, asyncio.Lock] = {}

    async def resolve(self, ref: str) -> Image:
        """The image's layers, unpacking and fetching it on first use."""
        self.sources.check(ref)
        index = self.root / "refs" / (hashlib.sha256(ref.encode()).hexdigest() + ".json")
        if index.exists():
            return Image(**json.loads(index.read_text()))
        async with self._locks.setdefault(ref, asyncio.Lock()):
            if index.exists():
                return Image(**json.loads(index.read_text()))
            image = await asyncio.to_thread(self._fetch, ref)
            index.parent.mkdir(parents=True, exist_ok=True)
            tmp = index.with_suffix(".tmp")
            tmp.write_text(json.dumps(image.__dict__))
            tmp.replace(index)
            return image

    def _fetch(self, ref: str) -> Image:
        if archive_path(ref) is not None:
            with os.fdopen(self.sources.open_archive(ref), "rb") as f:
                try:
                    with tarfile.open(fileobj=f) as tar:
                        return self._from_archive(ref, tar)
                except (tarfile.TarError, KeyError, ValueError, json.JSONDecodeError) as e:
                    raise InvalidRequest(f"{ref}: not a readable image archive ({e})") from None
        errors = []
        try:
            return self._from_engine(ref)
        except ImageNotFound as e:
            errors.append(str(e))
        try:
            return self._from_registry(ref)
        except ImageNotFound as e:
            errors.append(str(e))
        raise ImageNotFound(f"image {ref!r} not found: " + "; ".join(errors))

    # -- sources ------------------------------------------------------------------------------

    def _from_archive(self, ref: str, tar: tarfile.TarFile) -> Image:
        def member(name: str) -> IO[bytes]:
            f = tar.extractfile(name.lstrip("./") if name.startswith("./") else name)
            if f is None:
                raise InvalidRequest(f"image archive lacks {name}")
            return f

        names = set(tar.getnames())
        if "manifest.json" in names:  # docker save
            manifest = json.load(member("manifest.json"))[0]
            config = json.load(member(manifest["Config"]))
            layer_files = manifest["Layers"]
        elif "index.json" in names:  # OCI image layout
            index = json.load(member("index.json"))
            desc = self._pick(index["manifests"], lambda d: json.load(member(_blob(d))))
            manifest = json.load(member(_blob(desc)))
            config = json.load(member(_blob(manifest["config"])))
            layer_files = [_blob(layer) for layer in manifest["layers"]]
        else:
            raise InvalidRequest(f"{ref}: neither a docker save archive nor an OCI image layout")
        diff_ids = config["rootfs"]["diff_ids"]
        for diff_id, name in zip(diff_ids, layer_files, strict=True):
            self._unpack(diff_id, lambda name=name: member(name))
        return self._image(ref, config)

    def _from_engine(self, ref: str) -> Image:
        try:
            import docker
            from docker.errors import DockerException
            from docker.errors import ImageNotFound as DockerImageNotFound
        except ImportError:
            raise ImageNotFound("the docker package is not installed") from None
        try:
            client = docker.DockerClient(base_url=self.docker_url) if self.docker_url else docker.from_env()
            stream = client.images.get(ref).save(named=True)
        except DockerImageNotFound:
            raise ImageNotFound(f"not in the local Docker image store ({ref})") from None
        except DockerException as e:
            raise ImageNotFound(f"no Docker engine to look in ({e.__class__.__name__})") from None
        except Exception as e:  # noqa: BLE001 - the SDK's own errors for odd names are plain Exceptions
            raise ImageNotFound(f"not in the local Docker image store ({ref}: {e})"[:500]) from None
        with tempfile.TemporaryFile(dir=self.root if self.root.exists() else None) as f:
            for chunk in stream:
                f.write(chunk)
            f.seek(0)
            with tarfile.open(fileobj=f) as tar:
                return self._from_archive(ref, tar)

    def _from_registry(self, ref: str) -> Image:
        host = registry_host(ref)
        if host is None:
            raise ImageNotFound(f"{ref!r} names no registry host (write e.g. localhost:5000/name:tag)")
        rest = ref.partition("/")[2]
        name, _, tag = rest.partition("@") if "@" in rest else rest.rpartition(":") if ":" in rest.split("/")[-1] else (rest, "", "latest")
        loopback = host.split(":")[0] in ("localhost", "127.0.0.1", "[::1]")
        schemes = ["https", "http"] if loopback else ["https"]
        last_error: Exception | None = None
        for scheme in schemes:
            try:
                with httpx.Client(base_url=f"{scheme}://{host}/v2/", timeout=60, verify=True,
                                  event_hooks={"request": [self._allowed_host]}) as http:
                    return self._pull(http, ref, name, tag)
            except httpx.HTTPError as e:
                last_error = e
        raise ImageNotFound(f"registry {host} unreachable: {last_error}")

    def _pull(self, http: httpx.Client, ref: str, name: str, tag: str) -> Image:
        def get(path: str, accept: str | None = None) -> httpx.Response:
            headers = {"Accept": accept} if accept else {}
            response = http.get(path, headers=headers, follow_redirects=True)
            if response.status_code == 401 and (token := self._token(response)):
                http.headers["Authorization"] = f"Bearer {token}"
                response = http.get(path, headers=headers, follow_redirects=True)
            if response.status_code == 404:
                raise ImageNotFound(f"registry has no {path}")
            response.raise_for_status()
            return response

        manifest = get(f"{name}/manifests/{tag}", MANIFEST_TYPES).json()
        if "manifests" in manifest:
            desc = self._pick(manifest["manifests"], None)
            manifest = get(f"{name}/manifests/{desc['digest']}", MANIFEST_TYPES).json()
        config = get(f"{name}/blobs/{manifest['config']['digest']}").json()
        for diff_id, layer in zip(config["rootfs"]["diff_ids"], manifest["layers"], strict=True):
            def open_blob(digest: str = layer["digest"]) -> IO[bytes]:
                f = tempfile.TemporaryFile()
                hasher = hashlib.sha256()
                size, deadline = 0, time.monotonic() + REGISTRY_DEADLINE
                with http.stream("GET", f"{name}/blobs/{digest}", follow_redirects=True) as r:
                    r.raise_for_status()
                    for chunk in r.iter_bytes():
                        size += len(chunk)
                        if size > self.sources.max_archive_bytes or time.monotonic() > deadline:
                            raise InvalidRequest(f"layer {digest} is over {self.sources.max_archive_bytes} "
                                                 f"bytes or took over {REGISTRY_DEADLINE:g} s")
                        hasher.update(chunk)
                        f.write(chunk)
                if f"sha256:{hasher.hexdigest()}" != digest:
                    raise InvalidRequest(f"layer {digest} failed its digest check")
                f.seek(0)
                return f
            self._unpack(diff_id, open_blob)
        return self._image(ref, config)

    def _allowed_host(self, request: httpx.Request) -> None:
        """Every request of a pull (redirects and token realms included) goes only to an allowed
        registry: a registry's answer must not make the orchestrator connect anywhere."""
        host = request.url.netloc.decode()
        if not self.sources.registry_allowed(host):
            raise ImageNotFound(f"the registry sent the pull to {host}, which is not an allowed registry")

    def _token(self, response: httpx.Response) -> str | None:
        challenge = response.headers.get("www-authenticate", "")
        params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        if not challenge.lower().startswith("bearer") or "realm" not in params:
            return None
        query = {k: v for k, v in params.items() if k in ("service", "scope")}
        with httpx.Client(timeout=30, event_hooks={"request": [self._allowed_host]}) as http:
            data = http.get(params["realm"], params=query).json()
        return data.get("token") or data.get("access_token")

    @staticmethod
    def _pick(manifests: list[dict], _load) -> dict:
        for desc in manifests:
            platform = desc.get("platform") or {}
            if platform.get("os", "linux") == "linux" and platform.get("architecture", "amd64") == "amd64":
                return desc
        raise ImageNotFound("the image has no linux/amd64 variant")

    # -- layers -------------------------------------------------------------------------------

    def _image(self, ref: str, config: dict) -> Image:
        layers = [str(self._layer_dir(d)) for d in reversed(config["rootfs"]["diff_ids"])]
        return Image(ref=ref, layers=layers, env=_env(config))

    def _layer_dir(self, diff_id: str) -> Path:
        return self.root / "layers" / diff_id.split(":")[-1]

    def _unpack(self, diff_id: str, open_layer) -> None:
        target = self._layer_dir(diff_id)
        if target.exists():
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".unpack-", dir=target.parent))
        try:
            desc = f"unpacking layer {diff_id.split(':')[-1][:12]}"
            with open_layer() as opened, progress.reading(opened, desc) as raw:
                _extract_layer(_decompressed(raw), staging)
            with contextlib.suppress(OSError):  # a concurrent unpack of the same layer won
                staging.rename(target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def _blob(desc: dict) -> str:
    algo, digest = desc["digest"].split(":")
    return f"blobs/{algo}/{digest}"


def _decompressed(raw: IO[bytes]) -> IO[bytes]:
    head = raw.read(2)
    raw.seek(0) if raw.seekable() else None
    if head == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw)  # type: ignore[return-value]
    if not raw.seekable():
        return io.BufferedReader(_Prefixed(head, raw))  # type: ignore[arg-type]
    return raw


class _Prefixed(io.RawIOBase):
    def __init__(self, head: bytes, rest: IO[bytes]):
        self.head, self.rest = head, rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        data = self.head or self.rest.read(len(buffer))
        self.head = b""
        buffer[: len(data)] = data
        return len(data)


def _members(tar: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    for member in tar:
        name = member.name.lstrip("/")
        if name.startswith("../") or "/../" in f"/{name}/":
            raise InvalidRequest(f"layer member {member.name!r} escapes the layer")
        yield member


def _extract_layer(stream: IO[bytes], dest: Path) -> None:
    """Unpack one layer tar, turning OCI whiteouts into overlayfs ones."""
    opaque: list[Path] = []
    with tarfile.open(fileobj=stream, mode="r|*") as tar:
        for member in _members(tar):
            parent, base = os.path.split(member.name.lstrip("/").rstrip("/"))
            if base == ".wh..wh..opq":
                opaque.append(dest / parent)
                (dest / parent).mkdir(parents=True, exist_ok=True)
            elif base.startswith(".wh."):
                (dest / parent).mkdir(parents=True, exist_ok=True)
                os.mknod(dest / parent / base[4:], 0o600 | 0o020000, os.makedev(0, 0))
            elif member.isdev():
                continue  # device nodes come from the sandbox's own /dev
            else:
                checked = tarfile.tar_filter(member, str(dest))
                tar.extract(checked.replace(mode=member.mode, deep=False), dest,
                            numeric_owner=True, filter="fully_trusted")
    for d in opaque:
        os.setxattr(d, "trusted.overlay.opaque", b"y")
