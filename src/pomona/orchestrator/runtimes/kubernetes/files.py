"""The files API of a kubernetes sandbox, through helper commands in its pod (the gate's
busybox: stat, cat, find, tar, sh), binary-safe. `PodFS` is to a pod what docker/files.py's
ContainerFS is to a container: one per sandbox, the same operations and errors; an upload never
writes through a link, and what it writes belongs to the sandbox user."""

from __future__ import annotations

import builtins
import posixpath
import stat as statmod
from collections.abc import Awaitable, Callable

from pomona.errors import FileNotFoundInSandbox, InvalidRequest, PathOutsideSandbox, SandboxFailed
from pomona.orchestrator.linux.safefs import normalize
from pomona.orchestrator.runtimes.archives import clean_archive
from pomona.orchestrator.runtimes.kubernetes import gate
from pomona.orchestrator.runtimes.kubernetes.commands import Done
from pomona.orchestrator.types import FileInfo

FILE_TYPES = {statmod.S_IFREG: "file", statmod.S_IFDIR: "directory", statmod.S_IFLNK: "symlink"}
Run = Callable[[list[str], bytes | None], Awaitable[Done]]  # a helper command (argv, stdin)


def _missing(path: str) -> FileNotFoundInSandbox:
    return FileNotFoundInSandbox(f"{path}: no such file or directory in the sandbox")


def _said(done: Done) -> str:
    return done.err.decode(errors="replace").strip()


class PodFS:
    """The files of one sandbox: `run` runs a helper command in its pod, `uid` is the sandbox
    user's."""

    def __init__(self, run: Run, uid: int):
        self.run, self.uid = run, uid

    async def _stat(self, path: str, follow: bool = False) -> FileInfo | None:
        done = await self.run(
            ["stat", *(["-L"] if follow else []), "-c", "%f %s %Y", "--", path], None
        )
        if done.code:
            if b"No such file" in done.err or b"Not a directory" in done.err:
                return None
            raise SandboxFailed(f"stat {path}: {_said(done)}")
        raw, size, mtime = done.out.split()[:3]
        return _file_info(path, int(raw, 16), int(size), float(mtime))

    async def read(self, path: str) -> bytes:
        path = normalize(path)
        info = await self._stat(path, follow=True)
        if info is None:
            raise _missing(path)
        if info.type != "file":
            raise InvalidRequest(
                f"{path} is a directory"
                if info.type == "directory"
                else f"{path} is not a regular file"
            )
        done = await self.run(["cat", "--", path], None)
        if done.code:
            raise FileNotFoundInSandbox(f"{path}: {_said(done)}")
        return done.out

    async def write(self, path: str, data: bytes, mode: int = 0o644) -> None:
        path = normalize(path)
        if posixpath.basename(path) == "":
            raise InvalidRequest(f"{path!r} names a directory, not a file")
        # missing parents are made one by one and given to the sandbox user, like the file
        script = (
            'p=$1 m=$2 u=$3; shift 3; [ -d "$p" ] && { echo "$p is a directory" >&2; exit 21; }; '
            'for d in "$@"; do [ -d "$d" ] || { mkdir "$d" && chown "$u:$u" "$d"; } || exit 20; done; '
            'cat > "$p" && chmod "$m" "$p" && chown "$u:$u" "$p"'
        )
        parents = _ancestors(posixpath.dirname(path))
        done = await self.run(
            ["sh", "-c", script, "write", path, oct(mode & 0o7777)[2:], str(self.uid), *parents],
            data,
        )
        if done.code == 21:
            raise InvalidRequest(f"{path} is a directory")
        if done.code:
            message = _said(done)
            if "Not a directory" in message or "File exists" in message:
                raise InvalidRequest(f"a component of {path} is not a directory")
            raise SandboxFailed(f"could not write {path}: {message}")

    async def stat(self, path: str) -> FileInfo:
        path = normalize(path)
        info = await self._stat(path)
        if info is None:
            raise _missing(path)
        return info

    async def list(self, path: str) -> builtins.list[FileInfo]:
        path = normalize(path)
        info = await self._stat(path, follow=True)
        if info is None:
            raise _missing(path)
        if info.type != "directory":
            raise InvalidRequest(f"a component of {path} is not a directory")
        done = await self.run(
            [
                "find",
                path.rstrip("/") + "/",
                "-mindepth",
                "1",
                "-maxdepth",
                "1",
                "-exec",
                gate.BUSYBOX,
                "stat",
                "-c",
                "%f %s %Y %n",
                "{}",
                "+",
            ],
            None,
        )
        entries = []
        for line in done.out.decode(errors="replace").splitlines():
            parts = line.split(" ", 3)
            if len(parts) != 4 or "/" not in parts[3]:
                continue  # a name with a newline in it: not listable this way
            name = parts[3].rsplit("/", 1)[1]
            entries.append(
                _file_info(
                    posixpath.join(path, name), int(parts[0], 16), int(parts[1]), float(parts[2])
                )
            )
        return sorted(entries, key=lambda e: e.name)

    async def remove(self, path: str, recursive: bool = False) -> None:
        path = normalize(path)
        if path == "/":
            raise InvalidRequest("refusing to remove the sandbox's root")
        info = await self._stat(path)
        if info is None:
            raise _missing(path)
        argv = (
            (["rm", "-rf", "--", path] if recursive else ["rmdir", "--", path])
            if info.type == "directory"
            else ["rm", "-f", "--", path]
        )
        done = await self.run(argv, None)
        if done.code:
            message = _said(done)
            if "not empty" in message.lower():
                raise InvalidRequest(f"{path} is a non-empty directory; pass recursive=True")
            raise SandboxFailed(f"could not remove {path}: {message}")

    async def tar_out(self, path: str) -> bytes:
        """A directory's entries under "./", a file under its base name, as the other runtimes."""
        path = normalize(path)
        info = await self._stat(path, follow=True)
        if info is None:
            raise _missing(path)
        if info.type == "directory":
            argv = ["tar", "-C", path, "-cf", "-", "."]
        else:
            argv = ["tar", "-C", posixpath.dirname(path), "-cf", "-", posixpath.basename(path)]
        done = await self.run(argv, None)
        if done.code:
            raise SandboxFailed(f"could not archive {path}: {_said(done)}")
        return done.out

    async def tar_in(self, path: str, tar: bytes) -> None:
        """Unpack a cleaned archive (archives.clean_archive) after checking that nothing it goes
        through is a symlink already in the sandbox: an upload never writes through links."""
        path = normalize(path)
        cleaned, prefixes = clean_archive(tar, self.uid)
        script = (
            't=$1 u=$2; shift 2; for d in "$@"; do [ -L "$t/$d" ] && { echo "$t/$d" >&2; exit 30; }; done; '
            'mkdir -p "$t" && chown "$u:$u" "$t" && exec tar -C "$t" -xf -'
        )
        done = await self.run(
            ["sh", "-c", script, "untar", path, str(self.uid), *sorted(prefixes)], cleaned
        )
        if done.code == 30:
            raise PathOutsideSandbox(
                f"{_said(done)} is a symlink; an upload never writes through links"
            )
        if done.code:
            raise SandboxFailed(f"could not unpack into {path}: {_said(done)}")


def _file_info(path: str, raw_mode: int, size: int, mtime: float) -> FileInfo:
    kind = FILE_TYPES.get(statmod.S_IFMT(raw_mode), "other")
    return FileInfo(
        name=posixpath.basename(path) or "/",
        path=path,
        type=kind,  # type: ignore[arg-type]
        size=size if kind == "file" else 0,
        mode=statmod.S_IMODE(raw_mode),
        modified=mtime,
    )


def _ancestors(directory: str) -> list[str]:
    """ "/a/b/c" -> ["/a", "/a/b", "/a/b/c"]: the directories a write may have to make."""
    parts = [p for p in directory.split("/") if p]
    return ["/" + "/".join(parts[:i]) for i in range(1, len(parts) + 1)]
