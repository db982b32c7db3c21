"""The files API of a docker sandbox, through the engine's archive API (GET/PUT/HEAD
/containers/{id}/archive): the engine resolves paths inside the container's root, so `..` and
planted symlinks stay inside the sandbox. Listing and removing use a small command as root (GNU
`find -printf`, `rm`), with an archive fallback for images whose `find` is not GNU's (busybox).

`ContainerFS` is to a container what linux/safefs.py's SandboxFS is to a local sandbox: one per
sandbox, the same operations (read, write, list, stat, remove, tar_out, tar_in), the same
errors; and like it, it never follows a link out, and everything it writes belongs to the
sandbox user.
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import contextlib
import io
import json
import posixpath
import re
import stat as statmod
import tarfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pomona.errors import FileNotFoundInSandbox, InvalidRequest, PathOutsideSandbox, SandboxFailed
from pomona.orchestrator.linux.safefs import normalize
from pomona.orchestrator.runtimes.archives import clean_archive
from pomona.orchestrator.types import SANDBOX_HOME, ExecResult, FileInfo

MAX_LINKS = 40
# Go's os.FileMode bits, as the engine reports them in the archive stat header
_GO_DIR, _GO_SYMLINK, _GO_SETUID, _GO_SETGID, _GO_STICKY = (
    1 << 31,
    1 << 27,
    1 << 23,
    1 << 22,
    1 << 20,
)
_GO_OTHER = (
    (1 << 26) | (1 << 25) | (1 << 24) | (1 << 21) | (1 << 19)
)  # device, pipe, socket, char, irregular
Run = Callable[[list[str]], Awaitable[ExecResult]]  # a helper command as root inside the container


@dataclass
class Stat:
    """An entry as the engine's archive stat header reports it."""

    name: str
    type: str
    size: int
    mode: int
    modified: float
    link_target: str = ""

    def info(self, path: str) -> FileInfo:
        return FileInfo(
            name=posixpath.basename(path) or "/",
            path=path,
            type=self.type,  # type: ignore[arg-type]
            size=self.size,
            mode=self.mode,
            modified=self.modified,
        )


def _parse_time(value: str) -> float:
    """RFC 3339 with nanoseconds ("2024-01-02T03:04:05.123456789Z") to a timestamp."""
    match = re.match(
        r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)?$", value or ""
    )
    if not match:
        return 0.0
    stamp = match.group(1) + (match.group(3) or "Z").replace("Z", "+00:00")
    try:
        base = datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return 0.0
    return base + float("0." + match.group(2)) if match.group(2) else base


def decode_stat(header: str) -> Stat:
    raw = json.loads(base64.b64decode(header))
    mode = int(raw.get("mode", 0))
    kind = (
        "directory"
        if mode & _GO_DIR
        else "symlink"
        if mode & _GO_SYMLINK
        else "other"
        if mode & _GO_OTHER
        else "file"
    )
    perms = (
        (mode & 0o777)
        | (statmod.S_ISUID if mode & _GO_SETUID else 0)
        | (statmod.S_ISGID if mode & _GO_SETGID else 0)
        | (statmod.S_ISVTX if mode & _GO_STICKY else 0)
    )
    return Stat(
        name=raw.get("name", ""),
        type=kind,
        size=int(raw.get("size", 0)),
        mode=perms,
        modified=_parse_time(raw.get("mtime", "")),
        link_target=raw.get("linkTarget", ""),
    )


def tar_member(
    name: str, uid: int, mode: int, kind: bytes = tarfile.REGTYPE, size: int = 0
) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.size = kind, mode, size
    info.uid = info.gid = uid
    info.mtime = int(time.time())
    return info


class ContainerFS:
    """The files of one container. `run` runs a helper command in it as root."""

    def __init__(self, api: Any, container_id: str, uid: int, engine: str, run: Run):
        self.api, self.container_id, self.uid, self.engine = api, container_id, uid, engine
        self._run = run
        self.gnu_find: bool | None = None  # learned on the first listing

    async def _call(self, fn: Callable[[], Any]) -> Any:
        """A blocking SDK call, off the event loop."""
        return await asyncio.to_thread(fn)

    async def make_dirs(self, workdir: str) -> None:
        """/tmp (1777), the workdir and $HOME owned by the sandbox user: one archive upload at /
        (the engine creates missing parents; existing directories get this owner and mode)."""
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            tar.addfile(tar_member("tmp", 0, 0o1777, tarfile.DIRTYPE))
            for path in (normalize(workdir), SANDBOX_HOME):
                if path != "/":
                    tar.addfile(tar_member(path.lstrip("/"), self.uid, 0o755, tarfile.DIRTYPE))
        await self.put("/", buf.getvalue())

    def _archive_url(self) -> str:
        return self.api._url("/containers/{0}/archive", self.container_id)

    def _file_error(self, response: Any, path: str) -> Exception:
        try:
            message = response.json().get("message", response.text)
        except ValueError:
            message = response.text
        if response.status_code == 404 and re.search(r"no such container", message, re.I):
            return SandboxFailed(f"the sandbox's container is gone: {message}")
        if response.status_code == 404:
            return FileNotFoundInSandbox(f"{path}: no such file or directory in the sandbox")
        if response.status_code == 400 and "not a directory" in message.lower():
            return InvalidRequest(f"a component of {path} is not a directory")
        if response.status_code in (400, 403):
            return InvalidRequest(f"{path}: {message}")
        return SandboxFailed(f"{path}: {self.engine} said ({response.status_code}) {message}")

    async def lookup(self, path: str) -> Stat | None:
        """The entry at path, a final link not followed; None when nothing is there."""

        def head() -> Stat | None:
            response = self.api.head(self._archive_url(), params={"path": path})
            if response.status_code == 404:
                return None
            if response.status_code >= 300:
                raise self._file_error(response, path)
            header = response.headers.get("X-Docker-Container-Path-Stat")
            if not header:
                raise SandboxFailed(f"{path}: the {self.engine} engine sent no stat header")
            return decode_stat(header)

        return await self._call(head)

    async def _resolve(self, path: str) -> tuple[str, Stat]:
        """Follow a final symlink (the engine resolves it inside the container's root)."""
        for _ in range(MAX_LINKS):
            info = await self.lookup(path)
            if info is None:
                raise FileNotFoundInSandbox(f"{path}: no such file or directory in the sandbox")
            if info.type != "symlink":
                return path, info
            target = info.link_target or ""
            if not target.startswith("/"):
                target = posixpath.join(posixpath.dirname(path), target)
            path = normalize(target)
        raise PathOutsideSandbox(f"{path}: too many levels of symbolic links")

    async def _get_tar(self, path: str) -> bytes:
        def get() -> bytes:
            response = self.api.get(self._archive_url(), params={"path": path}, stream=True)
            try:
                if response.status_code >= 300:
                    raise self._file_error(response, path)
                return b"".join(response.iter_content(1 << 20))
            finally:
                response.close()

        return await self._call(get)

    async def put(self, directory: str, data: bytes) -> None:
        def put() -> None:
            response = self.api.put(self._archive_url(), params={"path": directory}, data=data)
            if response.status_code >= 300:
                raise self._file_error(response, directory)

        await self._call(put)

    async def _ensure_dir(self, path: str, depth: int = 0) -> None:
        """mkdir -p through the archive API: missing components owned by the sandbox user."""
        if depth > MAX_LINKS:
            raise PathOutsideSandbox(f"{path}: too many levels of symbolic links")
        info = await self.lookup(path)
        if info is None:
            parent, name = posixpath.split(path)
            await self._ensure_dir(parent, depth + 1)
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
                tar.addfile(tar_member(name, self.uid, 0o755, tarfile.DIRTYPE))
            await self.put(parent, buf.getvalue())
        elif info.type == "symlink":
            resolved, _ = await self._resolve(path) if info.link_target else (path, info)
            await self._ensure_dir(resolved, depth + 1)
        elif info.type != "directory":
            raise InvalidRequest(f"a component of {path} is not a directory")

    async def read(self, path: str) -> bytes:
        path, info = await self._resolve(normalize(path))
        if info.type != "file":
            if info.type == "directory":
                raise InvalidRequest(f"{path} is a directory")
            raise InvalidRequest(f"{path} is not a regular file")
        data = await self._get_tar(path)
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            for member in tar:
                if member.isfile():
                    f = tar.extractfile(member)
                    return f.read() if f else b""
        raise InvalidRequest(f"{path} is not a regular file")

    async def write(self, path: str, data: bytes, mode: int = 0o644) -> None:
        path = normalize(path)
        if posixpath.basename(path) == "":
            raise InvalidRequest(f"{path!r} names a directory, not a file")
        existing = await self.lookup(path)
        if existing and existing.type == "symlink":
            with contextlib.suppress(FileNotFoundInSandbox):
                path, existing = await self._resolve(path)
        if existing and existing.type == "directory":
            raise InvalidRequest(f"{path} is a directory")
        if existing and existing.type == "other":
            raise InvalidRequest(f"{path} is not a regular file (a FIFO, socket or device)")
        parent, name = posixpath.split(path)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            tar.addfile(tar_member(name, self.uid, mode & 0o7777, size=len(data)), io.BytesIO(data))
        try:
            await self.put(parent, buf.getvalue())
        except FileNotFoundInSandbox:
            await self._ensure_dir(parent)
            await self.put(parent, buf.getvalue())

    async def stat(self, path: str) -> FileInfo:
        path = normalize(path)
        info = await self.lookup(path)
        if info is None:
            raise FileNotFoundInSandbox(f"{path}: no such file or directory in the sandbox")
        return info.info(path)

    async def list(self, path: str) -> builtins.list[FileInfo]:
        path = normalize(path)
        if self.gnu_find is not False:
            result = await self._run(
                [
                    "find",
                    path.rstrip("/") + "/",
                    "-mindepth",
                    "1",
                    "-maxdepth",
                    "1",
                    "-printf",
                    r"%f\0%y\0%s\0%m\0%T@\0",
                ]
            )
            if result.exit_code == 0:
                self.gnu_find = True
                return self._parse_find(path, result.stdout)
            if (
                result.exit_code in (126, 127)
                or "printf" in result.stderr
                or "unknown" in result.stderr
            ):
                self.gnu_find = False
        return await self._list_by_archive(path)

    @staticmethod
    def _parse_find(path: str, output: str) -> builtins.list[FileInfo]:
        fields = output.split("\0")
        kinds = {"f": "file", "d": "directory", "l": "symlink"}
        entries = []
        for i in range(0, len(fields) - 4, 5):
            name, kind, size, mode, mtime = fields[i : i + 5]
            entries.append(
                FileInfo(
                    name=name,
                    path=posixpath.join(path, name),
                    type=kinds.get(kind, "other"),  # type: ignore[arg-type]
                    size=int(size),
                    mode=int(mode, 8),
                    modified=float(mtime),
                )
            )
        return sorted(entries, key=lambda e: e.name)

    async def _list_by_archive(self, path: str) -> builtins.list[FileInfo]:
        path, info = await self._resolve(path)
        if info.type != "directory":
            raise InvalidRequest(f"a component of {path} is not a directory")
        data = await self._get_tar(path)
        entries: dict[str, FileInfo] = {}
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            for member in tar:
                parts = [p for p in member.name.split("/") if p not in ("", ".")]
                if path != "/":
                    parts = parts[1:]  # the archive's top entry is the directory itself
                if len(parts) != 1:
                    continue
                kind = (
                    "directory"
                    if member.isdir()
                    else "symlink"
                    if member.issym()
                    else "file"
                    if member.isreg() or member.islnk()
                    else "other"
                )
                entries[parts[0]] = FileInfo(
                    name=parts[0],
                    path=posixpath.join(path, parts[0]),
                    type=kind,  # type: ignore[arg-type]
                    size=member.size if kind == "file" else 0,
                    mode=member.mode & 0o7777,
                    modified=float(member.mtime),
                )
        return sorted(entries.values(), key=lambda e: e.name)

    async def remove(self, path: str, recursive: bool = False) -> None:
        path = normalize(path)
        if path == "/":
            raise InvalidRequest("refusing to remove the sandbox's root")
        info = await self.lookup(path)
        if info is None:
            raise FileNotFoundInSandbox(f"{path}: no such file or directory in the sandbox")
        if info.type == "directory":
            argv = ["rm", "-rf", "--", path] if recursive else ["rmdir", "--", path]
        else:
            argv = ["rm", "-f", "--", path]
        result = await self._run(argv)
        if result.exit_code:
            message = (result.stderr or result.stdout).strip()
            if "not empty" in message.lower():
                raise InvalidRequest(f"{path} is a non-empty directory; pass recursive=True")
            raise SandboxFailed(f"could not remove {path}: {message}")

    async def tar_out(self, path: str) -> bytes:
        """The engine's archive, re-rooted like the local runtime's: a directory's entries under
        "./", a file under its base name."""
        path, info = await self._resolve(normalize(path))
        if info.type == "other":
            raise InvalidRequest(
                f"{path} is not a regular file (a FIFO, socket or device); the files "
                "API serves regular files, directories and symlinks only"
            )
        data = await self._get_tar(path)
        out = io.BytesIO()
        base = posixpath.basename(path)
        with (
            tarfile.open(fileobj=io.BytesIO(data), mode="r:") as src,
            tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as dst,
        ):
            for member in src:
                if info.type == "directory":
                    parts = [p for p in member.name.split("/") if p not in ("", ".")]
                    if path != "/" and parts and parts[0] == base:
                        parts = parts[1:]
                    member.name = "/".join([".", *parts])
                    if member.islnk():
                        link = [p for p in member.linkname.split("/") if p not in ("", ".")]
                        if path != "/" and link and link[0] == base:
                            link = link[1:]
                        member.linkname = "/".join([".", *link])
                dst.addfile(member, src.extractfile(member) if member.isreg() else None)
        return out.getvalue()

    async def tar_in(self, path: str, tar: bytes) -> None:
        """Unpack a tar at path: members may not leave it (absolute names, `..`), devices and
        fifos are skipped, hard links become copies, and everything belongs to the sandbox user
        (runtimes/archives.py); nothing is written through a link already in the sandbox."""
        path = normalize(path)
        clean, prefixes = clean_archive(tar, self.uid)
        await self._ensure_dir(path)
        resolved, _ = await self._resolve(path)
        await self._check_no_links(resolved, prefixes)
        await self.put(resolved, clean)

    async def _check_no_links(self, base: str, prefixes: set[str]) -> None:
        """Refuse an upload whose members would pass through a symlink already in the sandbox
        (the engine would follow it, inside the container; the contract is to never follow)."""
        missing: list[str] = []
        for prefix in sorted(prefixes, key=lambda p: p.count("/")):
            if any(prefix.startswith(m + "/") for m in missing):
                continue  # under a directory that does not exist yet: nothing to follow
            info = await self.lookup(posixpath.join(base, prefix))
            if info is None:
                missing.append(prefix)
            elif info.type == "symlink":
                raise PathOutsideSandbox(
                    f"{posixpath.join(base, prefix)} is a symlink; an upload "
                    "never writes through links"
                )
            elif info.type != "directory":
                raise InvalidRequest(f"{posixpath.join(base, prefix)} is not a directory")
