"""OCI images as overlay layers: unpacked once into a shared cache, then stacked by every sandbox.

Sources, tried in this order for a reference:
  - an Apptainer/Singularity image: `sif:/p.sif`, any path ending in .sif, or `sif:/dir` for a
    sandbox directory (pomona.orchestrator.linux.sif);
  - an archive on disk: `docker-archive:/p.tar`, `oci-archive:/p.tar`, or any path ending in .tar
    (both `docker save` layouts and OCI image layouts are read);
  - the local Docker engine's (or Podman's Docker-compatible) image store;
  - a registry, over the OCI distribution API (`localhost:5000/name:tag`; plain HTTP is allowed for
    loopback registries, as Docker does).
Layers are keyed by their diff id (the sha256 of the uncompressed tar), so images that share
layers share them on disk. Whiteouts become overlayfs whiteouts and opaque directories.

The cache is keyed by digest (the image's config digest, its id), never by name alone: each
resolve asks the source what the name stands for now (the engine's image id, the registry's
manifest, the archive's config), so a rebuilt or re-tagged image is used as soon as it exists;
only a source that cannot be reached falls back to what the name last stood for. `cached`,
`remove` and `prune` back `pomona images list|remove|prune`.
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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, TypeVar

import httpx

from pomona import progress
from pomona.errors import ImageNotFound, InvalidRequest
from pomona.orchestrator.linux import sif
from pomona.orchestrator.sources import ImageSources, archive_path, registry_host, sif_path

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer
    from docker.models.images import Image as EngineImage

T = TypeVar("T")
BinaryReader = IO[bytes] | io.BufferedIOBase  # a layer's bytes (gzip's reader is no typing.IO)

REGISTRY_DEADLINE = 3600.0  # one layer's download
MANIFEST_TYPES = ", ".join(
    [
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    ]
)


@dataclass
class Image:
    ref: str
    layers: list[str]  # overlay lowerdirs, topmost first
    env: dict[str, str] = field(default_factory=dict)
    digest: str = ""  # sha256 of the image config: the image id


def _config_digest(raw: bytes) -> str:
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def _env(config: dict) -> dict[str, str]:
    pairs = (config.get("config") or {}).get("Env") or []
    return dict(p.split("=", 1) for p in pairs if "=" in p)


class ImageStore:
    def __init__(
        self,
        root: str | os.PathLike,
        docker_url: str | None = None,
        sources: ImageSources | None = None,
        shift: int = 0,
    ):
        """`shift`: where nothing can be idmapped (an ordinary user's runtime), files are
        stored owned by their id plus `shift`, the sandboxes' range, and overlayfs reads its
        metadata from user.* xattrs instead of trusted.* ones."""
        self.root = Path(root)
        self.docker_url = docker_url
        self.sources = sources or ImageSources()
        self.shift = shift
        self._locks: dict[str, asyncio.Lock] = {}

    async def resolve(self, ref: str) -> Image:
        """The image the reference stands for now: from the cache when its digest is there,
        else fetched and unpacked."""
        self.sources.check(ref)
        async with self._locks.setdefault(ref, asyncio.Lock()):
            known = self._read(self._ref_index(ref))
            digest = await asyncio.to_thread(self._current_digest, ref)
            digest = digest or (known or {}).get("digest")
            cached = self._read(self._digest_record(digest)) if digest else None
            if cached is not None:
                image = Image(**{**cached, "ref": ref})
            else:
                image = await asyncio.to_thread(self._fetch, ref)
                self._write(self._digest_record(image.digest), image.__dict__)
            self._write(
                self._ref_index(ref), {"ref": ref, "digest": image.digest, "used_at": time.time()}
            )
            return image

    # -- the cache ------------------------------------------------------------------------------

    def _ref_index(self, ref: str) -> Path:
        return self.root / "refs" / (hashlib.sha256(ref.encode()).hexdigest() + ".json")

    def _digest_record(self, digest: str) -> Path:
        return self.root / "digests" / (digest.split(":")[-1] + ".json")

    @staticmethod
    def _read(path: Path) -> dict | None:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) and data.get("digest") else None

    @staticmethod
    def _write(path: Path, data: dict) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(path)

    def _current_digest(self, ref: str) -> str | None:
        """What the reference stands for at its source right now; None if the source cannot
        be asked (then the cache's last answer stands)."""
        try:
            if sif_path(ref) is not None:
                return self._with_sif(ref, lambda fd: sif.digest(fd, ref, self.root / "sif"))
            if archive_path(ref) is not None:
                with (
                    os.fdopen(self.sources.open_archive(ref), "rb") as f,
                    tarfile.open(fileobj=f) as tar,
                ):
                    return _config_digest(self._archive_config(ref, tar)[1])
            engine = self._engine_image(ref)
            if engine is not None:
                return engine.id
            return self._registry_digest(ref)
        except (
            ImageNotFound,
            InvalidRequest,
            OSError,
            tarfile.TarError,
            KeyError,
            ValueError,
            httpx.HTTPError,
        ):
            return None

    def cached(self) -> list[dict]:
        """Every name in the cache: ref, digest, layers, bytes on disk, last use."""
        out = []
        for index in sorted((self.root / "refs").glob("*.json")):
            entry = self._read(index)
            record = self._read(self._digest_record(entry["digest"])) if entry else None
            if entry is None or record is None:
                continue
            size = sum(_tree_bytes(Path(layer)) for layer in record["layers"])
            out.append(
                {
                    "ref": entry["ref"],
                    "digest": entry["digest"],
                    "layers": len(record["layers"]),
                    "bytes": size,
                    "used_at": entry.get("used_at"),
                }
            )
        return out

    def remove(self, ref: str) -> bool:
        """Forget a name (its layers go at the next prune, unless another name uses them)."""
        index = self._ref_index(ref)
        if not index.exists():
            return False
        index.unlink()
        return True

    def prune(self, in_use: set[str]) -> dict[str, int]:
        """Delete digests no name points to, and layers that no remaining digest and nothing in
        `in_use` (the lower directories of live sandboxes and snapshots) stack."""
        named = {e["digest"] for i in (self.root / "refs").glob("*.json") if (e := self._read(i))}
        kept: set[str] = set(in_use)
        digests = 0
        for path in (self.root / "digests").glob("*.json"):
            record = self._read(path)
            if record is None or record["digest"] not in named:
                path.unlink(missing_ok=True)
                digests += 1
            else:
                kept.update(record["layers"])
        layers = freed = 0
        for layer in (self.root / "layers").glob("*"):
            if str(layer) in kept or layer.name.startswith(".unpack-"):
                continue
            freed += _tree_bytes(layer)
            shutil.rmtree(layer, ignore_errors=True)
            layers += 1
        return {"digests": digests, "layers": layers, "bytes": freed}

    def _fetch(self, ref: str) -> Image:
        if sif_path(ref) is not None:
            digest, layer, env = self._with_sif(
                ref, lambda fd: sif.fetch(fd, ref, self._stage, self.root / "sif")
            )
            return Image(ref=ref, layers=[str(layer)], env=env, digest=digest)
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

    def _with_sif(self, ref: str, call: Callable[[int], T]) -> T:
        """`call` on the SIF file or sandbox directory `ref` names, opened once (so what is
        checked is what is read)."""
        fd = self.sources.open_archive(ref, directory=True)
        try:
            return call(fd)
        finally:
            os.close(fd)

    def _archive_config(self, ref: str, tar: tarfile.TarFile) -> tuple[list[str], bytes]:
        """The layer member names and the raw config of a `docker save` or OCI layout archive."""

        def member(name: str) -> IO[bytes]:
            f = tar.extractfile(name.lstrip("./") if name.startswith("./") else name)
            if f is None:
                raise InvalidRequest(f"image archive lacks {name}")
            return f

        names = set(tar.getnames())
        if "manifest.json" in names:  # docker save
            manifest = json.load(member("manifest.json"))[0]
            return manifest["Layers"], member(manifest["Config"]).read()
        if "index.json" in names:  # OCI image layout
            index = json.load(member("index.json"))
            desc = self._pick(index["manifests"])
            manifest = json.load(member(_blob(desc)))
            return (
                [_blob(layer) for layer in manifest["layers"]],
                member(_blob(manifest["config"])).read(),
            )
        raise InvalidRequest(f"{ref}: neither a docker save archive nor an OCI image layout")

    def _from_archive(self, ref: str, tar: tarfile.TarFile) -> Image:
        layer_files, raw = self._archive_config(ref, tar)
        config = json.loads(raw)
        diff_ids = config["rootfs"]["diff_ids"]
        for diff_id, name in zip(diff_ids, layer_files, strict=True):

            def open_layer(name: str = name) -> IO[bytes]:
                f = tar.extractfile(name.lstrip("./") if name.startswith("./") else name)
                if f is None:
                    raise InvalidRequest(f"image archive lacks {name}")
                return f

            self._unpack(diff_id, open_layer)
        return self._image(ref, config, _config_digest(raw))

    def _engine_image(self, ref: str) -> EngineImage | None:
        """The engine's image object for `ref`, or None when there is no engine or no image."""
        try:
            import docker
            from docker.errors import DockerException
        except ImportError:
            return None
        try:
            client = (
                docker.DockerClient(base_url=self.docker_url)
                if self.docker_url
                else docker.from_env()
            )
            return client.images.get(ref)
        except DockerException:
            return None
        except Exception:  # noqa: BLE001 - the SDK's own errors for odd names are plain Exceptions
            return None

    def _from_engine(self, ref: str) -> Image:
        try:
            import docker
            from docker.errors import DockerException
            from docker.errors import ImageNotFound as DockerImageNotFound
        except ImportError:
            raise ImageNotFound("the docker package is not installed") from None
        try:
            client = (
                docker.DockerClient(base_url=self.docker_url)
                if self.docker_url
                else docker.from_env()
            )
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
        return self._with_registry(ref, self._pull)

    def _registry_digest(self, ref: str) -> str:
        """The config digest a registry's manifest names for `ref` now (no layer is fetched)."""
        return self._with_registry(
            ref, lambda http, ref, name, tag: self._manifest(http, name, tag)["config"]["digest"]
        )

    def _with_registry(self, ref: str, call: Callable[[httpx.Client, str, str, str], T]) -> T:
        host = registry_host(ref)
        if host is None:
            raise ImageNotFound(
                f"{ref!r} names no registry host (write e.g. localhost:5000/name:tag)"
            )
        rest = ref.partition("/")[2]
        name, _, tag = (
            rest.partition("@")
            if "@" in rest
            else rest.rpartition(":")
            if ":" in rest.split("/")[-1]
            else (rest, "", "latest")
        )
        loopback = host.split(":")[0] in ("localhost", "127.0.0.1", "[::1]")
        schemes = ["https", "http"] if loopback else ["https"]
        last_error: Exception | None = None
        for scheme in schemes:
            try:
                with httpx.Client(
                    base_url=f"{scheme}://{host}/v2/",
                    timeout=60,
                    verify=True,
                    event_hooks={"request": [self._allowed_host]},
                ) as http:
                    return call(http, ref, name, tag)
            except httpx.HTTPError as e:
                last_error = e
        raise ImageNotFound(f"registry {host} unreachable: {last_error}")

    def _get(self, http: httpx.Client, path: str, accept: str | None = None) -> httpx.Response:
        headers = {"Accept": accept} if accept else {}
        response = http.get(path, headers=headers, follow_redirects=True)
        if response.status_code == 401 and (token := self._token(response)):
            http.headers["Authorization"] = f"Bearer {token}"
            response = http.get(path, headers=headers, follow_redirects=True)
        if response.status_code == 404:
            raise ImageNotFound(f"registry has no {path}")
        response.raise_for_status()
        return response

    def _manifest(self, http: httpx.Client, name: str, tag: str) -> dict:
        manifest = self._get(http, f"{name}/manifests/{tag}", MANIFEST_TYPES).json()
        if "manifests" in manifest:
            desc = self._pick(manifest["manifests"])
            manifest = self._get(http, f"{name}/manifests/{desc['digest']}", MANIFEST_TYPES).json()
        return manifest

    def _pull(self, http: httpx.Client, ref: str, name: str, tag: str) -> Image:
        manifest = self._manifest(http, name, tag)
        config = self._get(http, f"{name}/blobs/{manifest['config']['digest']}").json()
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
                            raise InvalidRequest(
                                f"layer {digest} is over {self.sources.max_archive_bytes} "
                                f"bytes or took over {REGISTRY_DEADLINE:g} s"
                            )
                        hasher.update(chunk)
                        f.write(chunk)
                if f"sha256:{hasher.hexdigest()}" != digest:
                    raise InvalidRequest(f"layer {digest} failed its digest check")
                f.seek(0)
                return f

            self._unpack(diff_id, open_blob)
        return self._image(ref, config, manifest["config"]["digest"])

    def _allowed_host(self, request: httpx.Request) -> None:
        """Every request of a pull (redirects and token realms included) goes only to an allowed
        registry: a registry's answer must not make the orchestrator connect anywhere."""
        host = request.url.netloc.decode()
        if not self.sources.registry_allowed(host):
            raise ImageNotFound(
                f"the registry sent the pull to {host}, which is not an allowed registry"
            )

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
    def _pick(manifests: list[dict]) -> dict:
        for desc in manifests:
            platform = desc.get("platform") or {}
            if (
                platform.get("os", "linux") == "linux"
                and platform.get("architecture", "amd64") == "amd64"
            ):
                return desc
        raise ImageNotFound("the image has no linux/amd64 variant")

    # -- layers -------------------------------------------------------------------------------

    def _image(self, ref: str, config: dict, digest: str) -> Image:
        layers = [str(self._layer_dir(d)) for d in reversed(config["rootfs"]["diff_ids"])]
        return Image(ref=ref, layers=layers, env=_env(config), digest=digest)

    def _layer_dir(self, diff_id: str) -> Path:
        return self.root / "layers" / diff_id.split(":")[-1]

    def _unpack(self, diff_id: str, open_layer: Callable[[], IO[bytes]]) -> None:
        def fill(staging: Path) -> None:
            desc = f"unpacking layer {diff_id.split(':')[-1][:12]}"
            with open_layer() as opened, progress.reading(opened, desc) as raw:
                _extract_layer(_decompressed(raw), staging, "user" if self.shift else "trusted")

        self._stage(diff_id, fill)

    def _stage(self, layer_id: str, fill: Callable[[Path], None]) -> Path:
        """The layer directory of `layer_id`, filled once by `fill` (given an empty staging
        directory beside it) and renamed into place, so a half-made layer is never used."""
        target = self._layer_dir(layer_id)
        if target.exists():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".unpack-", dir=target.parent))
        try:
            fill(staging)
            if self.shift:
                shift_owners(staging, self.shift)
            with contextlib.suppress(OSError):  # a concurrent unpack of the same layer won
                staging.rename(target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return target


def shift_owners(path: Path, shift: int) -> None:
    """Every file's owner and group plus `shift` (ids beyond 65535 become the overflow id)."""

    def shift_one(name: str) -> None:
        st = os.lstat(name)
        os.lchown(name, _shifted(st.st_uid, shift), _shifted(st.st_gid, shift))

    shift_one(str(path))
    for root, dirs, files in os.walk(path):
        for name in (*dirs, *files):
            shift_one(os.path.join(root, name))


def _shifted(i: int, shift: int) -> int:
    return (i if i < 65536 else 65534) + shift


def _tree_bytes(path: Path) -> int:
    """Bytes of the regular files under `path` (walked without following links)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(root, name))
                total += st.st_size if not os.path.islink(os.path.join(root, name)) else 0
    return total


def _blob(desc: dict) -> str:
    algo, digest = desc["digest"].split(":")
    return f"blobs/{algo}/{digest}"


def _decompressed(raw: IO[bytes]) -> BinaryReader:
    """A layer's tar stream, gunzipped when it starts with gzip's magic. From a source that cannot
    seek back (a registry response, a pipe), the bytes peeked at are put in front again."""
    head = raw.read(2)
    if raw.seekable():
        raw.seek(0)
        stream: BinaryReader = raw
    else:
        stream = io.BufferedReader(_Prefixed(head, raw))
    return gzip.GzipFile(fileobj=stream) if head == b"\x1f\x8b" else stream


class _Prefixed(io.RawIOBase):
    def __init__(self, head: bytes, rest: IO[bytes]):
        self.head, self.rest = head, rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        view = memoryview(buffer)
        if self.head:
            data, self.head = self.head[: len(view)], self.head[len(view) :]
        else:
            data = self.rest.read(len(view))
        view[: len(data)] = data
        return len(data)


def _members(tar: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    for member in tar:
        name = member.name.lstrip("/")
        if name.startswith("../") or "/../" in f"/{name}/":
            raise InvalidRequest(f"layer member {member.name!r} escapes the layer")
        yield member


def _extract_layer(stream: BinaryReader, dest: Path, xattrs: str = "trusted") -> None:
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
                tar.extract(
                    checked.replace(mode=member.mode, deep=False),
                    dest,
                    numeric_owner=True,
                    filter="fully_trusted",
                )
    for d in opaque:
        os.setxattr(d, f"{xattrs}.overlay.opaque", b"y")
