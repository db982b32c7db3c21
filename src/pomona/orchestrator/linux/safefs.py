"""File operations on a sandbox's root filesystem from the host, immune to hostile paths.

Every lookup goes through openat2(RESOLVE_IN_ROOT) or a chain of O_NOFOLLOW opens relative to
directory fds, so `..`, absolute symlinks and a symlink swapped in mid-operation by a process in
the sandbox all stay inside the sandbox's root.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import posixpath
import shutil
import stat
import tarfile
from collections.abc import Callable, Iterator

from pomona.errors import (
    DiskFull,
    FileNotFoundInSandbox,
    InvalidRequest,
    PathOutsideSandbox,
    TooLarge,
)
from pomona.orchestrator.linux.syscalls import creating_as, open_in_root
from pomona.orchestrator.types import FileInfo, FileType, check_text

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# Opening a FIFO without O_NONBLOCK waits for a writer forever; a tty could become ours
NONBLOCK = os.O_NONBLOCK | os.O_NOCTTY
MAX_READ = 512 * 2**20  # one file read through the API; bigger files go by download_dir or exec
MAX_ARCHIVE_DEPTH = 2048  # directory levels a download walks (one open fd per level)
REMOVE_RETRIES = 100  # a directory refilled while we delete it: give up after this many rounds


def normalize(path: str, cwd: str = "/") -> str:
    """An absolute, normalized sandbox path; relative paths are taken from cwd."""
    if "\x00" in path:
        raise InvalidRequest("path contains a NUL byte")
    check_text(path, "the path")
    return posixpath.normpath(posixpath.join(cwd, path)) if path else cwd


@contextlib.contextmanager
def _opened(root_fd: int, path: str, flags: int, mode: int = 0o644) -> Iterator[int]:
    try:
        fd = open_in_root(root_fd, path, flags, mode)
    except OSError as e:
        raise _translate(e, path) from None
    try:
        yield fd
    finally:
        os.close(fd)


def _translate(error: OSError, path: str) -> Exception:
    if error.errno == errno.ENOENT:
        return FileNotFoundInSandbox(f"{path}: no such file or directory in the sandbox")
    if error.errno == errno.EISDIR:
        return InvalidRequest(f"{path} is a directory")
    if error.errno == errno.ENOTDIR:
        return InvalidRequest(f"a component of {path} is not a directory")
    if error.errno in (errno.ENXIO, errno.ENODEV):  # a FIFO with no reader, a device
        return InvalidRequest(f"{path} is not a regular file (a FIFO, socket or device)")
    if error.errno in (errno.ELOOP, errno.EXDEV):
        return PathOutsideSandbox(f"{path}: resolves through a link that leaves the sandbox")
    if error.errno == errno.ENOSPC or error.errno == errno.EDQUOT:
        return DiskFull(error.errno, f"{path}: the sandbox's disk quota is full")
    return error


class SandboxFS:
    """The files API over one sandbox's root filesystem, from the host.

    `open_root` gives a directory fd on that root (the local runtime's: a copy of the overlay
    mount with nothing mounted under it, so no walk can enter /proc or a bind mount). uid and
    gid are the sandbox user's ids inside; `base` is the first host id of the sandbox's range
    (its ids inside are host ids base..base+65535): what the host creates there is owned by
    base + uid, and archives carry the ids inside."""

    def __init__(
        self,
        open_root: Callable[[], int],
        uid: int = 0,
        gid: int = 0,
        base: int = 0,
        max_read: int = MAX_READ,
    ):
        self.open_root, self.uid, self.gid, self.base = open_root, base + uid, base + gid, base
        self.max_read = max_read

    @contextlib.contextmanager
    def _root(self) -> Iterator[int]:
        fd = self.open_root()
        try:
            yield fd
        finally:
            os.close(fd)

    def _creating(self) -> contextlib.AbstractContextManager[None]:
        return creating_as(self.uid, self.gid)

    def read(self, path: str) -> bytes:
        with self._root() as root, _opened(root, path, os.O_RDONLY | NONBLOCK) as fd:
            st = _regular(fd, path)
            if st.st_size > self.max_read:
                raise TooLarge(
                    f"{path} is {st.st_size} bytes, over the {self.max_read} byte limit "
                    "of one read; download it as an archive or read it in parts with exec"
                )
            os.set_blocking(fd, True)
            with os.fdopen(os.dup(fd), "rb") as f:
                data = f.read(self.max_read + 1)
            if len(data) > self.max_read:
                raise TooLarge(f"{path} grew past the {self.max_read} byte limit while being read")
            return data

    def write(self, path: str, data: bytes, mode: int = 0o644) -> None:
        parent, name = posixpath.split(path)
        if not name:
            raise InvalidRequest(f"{path!r} names a directory, not a file")
        with self._root() as root, self._creating():
            self._makedirs(root, parent)
            # no O_TRUNC before the type is known: truncating is only for regular files
            with _opened(root, path, os.O_WRONLY | os.O_CREAT | NONBLOCK, mode) as fd:
                _regular(fd, path)
                os.set_blocking(fd, True)
                os.ftruncate(fd, 0)
                os.fchown(fd, self.uid, self.gid)
                os.fchmod(fd, mode)
                view = memoryview(data)
                try:
                    while view:
                        view = view[os.write(fd, view) :]
                except OSError as e:
                    raise _translate(e, path) from None

    def mkdir(self, path: str) -> None:
        with self._root() as root, self._creating():
            self._makedirs(root, path)

    def _makedirs(self, root: int, path: str) -> None:
        current = "/"
        for part in [p for p in path.split("/") if p]:
            current = posixpath.join(current, part)
            with _opened(root, posixpath.dirname(current), os.O_PATH | os.O_DIRECTORY) as parent:
                try:
                    os.mkdir(part, 0o755, dir_fd=parent)
                    os.chown(part, self.uid, self.gid, dir_fd=parent, follow_symlinks=False)
                except FileExistsError:
                    pass

    def stat(self, path: str) -> FileInfo:
        parent, name = posixpath.split(path)
        with self._root() as root, _opened(root, parent or "/", os.O_PATH | os.O_DIRECTORY) as pfd:
            try:
                st = os.stat(name or ".", dir_fd=pfd, follow_symlinks=False)
            except OSError as e:
                raise _translate(e, path) from None
        return _info(name or "/", path, st)

    def list(self, path: str) -> list[FileInfo]:
        with self._root() as root, _opened(root, path, os.O_RDONLY | os.O_DIRECTORY) as fd:
            entries = []
            for entry in os.scandir(fd):
                with contextlib.suppress(FileNotFoundError):
                    st = entry.stat(follow_symlinks=False)
                    entries.append(_info(entry.name, posixpath.join(path, entry.name), st))
        return sorted(entries, key=lambda e: e.name)

    def remove(self, path: str, recursive: bool = False) -> None:
        parent, name = posixpath.split(path)
        if not name:
            raise InvalidRequest("refusing to remove the sandbox's root")
        with self._root() as root, _opened(root, parent or "/", os.O_PATH | os.O_DIRECTORY) as pfd:
            try:
                st = os.stat(name, dir_fd=pfd, follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    if not recursive:
                        os.rmdir(name, dir_fd=pfd)
                    else:
                        with _opened(root, parent or "/", os.O_RDONLY | os.O_DIRECTORY) as rfd:
                            remove_tree(rfd, name)
                else:
                    os.unlink(name, dir_fd=pfd)
            except OSError as e:
                if e.errno == errno.ENOTEMPTY:
                    raise InvalidRequest(
                        f"{path} is a non-empty directory; pass recursive=True"
                    ) from None
                raise _translate(e, path) from None

    # -- tar in and out ---------------------------------------------------------------------

    def tar_out(self, path: str) -> bytes:
        buf = io.BytesIO()
        with (
            self._root() as root,
            tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar,
        ):
            info = self.stat(path)
            if info.type == "directory":
                with _opened(root, path, DIR_FLAGS & ~os.O_NOFOLLOW) as fd:
                    _add_tree(tar, fd, ".", self.base)
            else:
                with _opened(root, path, os.O_RDONLY | NONBLOCK) as fd:
                    _add_file(tar, fd, posixpath.basename(path), _regular(fd, path), self.base)
        return buf.getvalue()

    def tar_in(self, path: str, data: bytes) -> None:
        with (
            self._root() as root,
            self._creating(),
            tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar,
        ):
            self._makedirs(root, path)
            with _opened(root, path, DIR_FLAGS & ~os.O_NOFOLLOW) as base:
                for member in tar:
                    self._extract(tar, member, base)

    def _extract(self, tar: tarfile.TarFile, member: tarfile.TarInfo, base: int) -> None:
        parts = [p for p in member.name.split("/") if p not in ("", ".")]
        if member.name.startswith("/") or ".." in parts:
            raise PathOutsideSandbox(f"archive member {member.name!r} points outside the target")
        if not parts:
            return
        dir_fd = os.dup(base)
        try:
            for part in parts[:-1]:
                parent, dir_fd = dir_fd, self._enter(dir_fd, part)
                os.close(parent)
            name = parts[-1]
            if member.isdir():
                os.close(self._enter(dir_fd, name))
                return
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                os.unlink(name, dir_fd=dir_fd)
            if member.issym():
                os.symlink(member.linkname, name, dir_fd=dir_fd)
                os.chown(name, self.uid, self.gid, dir_fd=dir_fd, follow_symlinks=False)
            elif member.isfile() or member.islnk():
                try:
                    source = tar.extractfile(member)
                except KeyError:  # a hard link to a name the archive does not hold
                    raise InvalidRequest(
                        f"archive member {member.name!r} is a hard link to "
                        f"{member.linkname!r}, which is not in the archive"
                    ) from None
                fd = os.open(
                    name,
                    os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                    member.mode & 0o7777,
                    dir_fd=dir_fd,
                )
                try:
                    os.fchown(fd, self.uid, self.gid)
                    os.fchmod(fd, member.mode & 0o777)
                    with os.fdopen(os.dup(fd), "wb") as out:
                        shutil.copyfileobj(source, out)  # type: ignore[arg-type]
                finally:
                    os.close(fd)
            # devices, fifos: never created from an upload
        except OSError as e:
            raise _translate(e, member.name) from None
        finally:
            os.close(dir_fd)

    def _enter(self, dir_fd: int, part: str) -> int:
        """Open (creating if needed) a child directory without following symlinks; dir_fd stays open."""
        try:
            os.mkdir(part, 0o755, dir_fd=dir_fd)
            os.chown(part, self.uid, self.gid, dir_fd=dir_fd, follow_symlinks=False)
        except FileExistsError:
            pass
        try:
            child = os.open(part, DIR_FLAGS, dir_fd=dir_fd)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR):
                raise PathOutsideSandbox(
                    f"{part!r} is a symlink or file, not a directory"
                ) from None
            raise
        return child


def _info(name: str, path: str, st: os.stat_result) -> FileInfo:
    kind: FileType = (
        "directory"
        if stat.S_ISDIR(st.st_mode)
        else "file"
        if stat.S_ISREG(st.st_mode)
        else "symlink"
        if stat.S_ISLNK(st.st_mode)
        else "other"
    )
    return FileInfo(
        name=name,
        path=path,
        type=kind,
        size=st.st_size,
        mode=stat.S_IMODE(st.st_mode),
        modified=st.st_mtime,
    )


def _inside(host_id: int, base: int) -> int:
    """A host id as the sandbox sees it (the overflow id, 65534, if outside its range)."""
    return host_id - base if 0 <= host_id - base < 65536 else 65534


def _tarinfo(name: str, st: os.stat_result, base: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mode, info.mtime = stat.S_IMODE(st.st_mode), int(st.st_mtime)
    info.uid, info.gid = _inside(st.st_uid, base), _inside(st.st_gid, base)
    return info


def _add_file(tar: tarfile.TarFile, fd: int, name: str, st: os.stat_result, base: int) -> None:
    info = _tarinfo(name, st, base)
    info.size = st.st_size
    with os.fdopen(os.dup(fd), "rb") as f:
        tar.addfile(info, f)


def _add_tree(tar: tarfile.TarFile, top_fd: int, top: str, base: int) -> None:
    """Walk by directory fds with O_NOFOLLOW, with an explicit stack (no recursion, so depth
    cannot exhaust Python's stack): a symlink is archived as a link, never followed."""
    info = _tarinfo(top, os.fstat(top_fd), base)
    info.type = tarfile.DIRTYPE
    tar.addfile(info)
    stack = [(os.dup(top_fd), top, sorted(os.listdir(top_fd), reverse=True))]
    try:
        while stack:
            dir_fd, prefix, names = stack[-1]
            if not names:
                os.close(stack.pop()[0])
                continue
            entry = names.pop()
            name = f"{prefix}/{entry}"
            try:
                st = os.stat(entry, dir_fd=dir_fd, follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    info = _tarinfo(name, st, base)
                    info.type, info.linkname = tarfile.SYMTYPE, os.readlink(entry, dir_fd=dir_fd)
                    tar.addfile(info)
                elif stat.S_ISDIR(st.st_mode):
                    if len(stack) >= MAX_ARCHIVE_DEPTH:
                        raise InvalidRequest(
                            f"{name} is more than {MAX_ARCHIVE_DEPTH} directories "
                            "deep; archive a deeper part of the tree on its own"
                        )
                    child = os.open(entry, DIR_FLAGS, dir_fd=dir_fd)
                    info = _tarinfo(name, os.fstat(child), base)
                    info.type = tarfile.DIRTYPE
                    tar.addfile(info)
                    stack.append((child, name, sorted(os.listdir(child), reverse=True)))
                elif stat.S_ISREG(st.st_mode):
                    fd = os.open(
                        entry, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | NONBLOCK, dir_fd=dir_fd
                    )
                    try:
                        _add_file(tar, fd, name, os.fstat(fd), base)
                    finally:
                        os.close(fd)
            except OSError as e:  # gone, or swapped for a link, while we walked: skip it
                if e.errno not in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
                    raise
    finally:
        for dir_fd, _, _ in stack:
            os.close(dir_fd)


def _regular(fd: int, path: str) -> os.stat_result:
    """Only regular files are read or written: a FIFO, socket or device is refused, not waited on."""
    st = os.fstat(fd)
    if stat.S_ISDIR(st.st_mode):
        raise InvalidRequest(f"{path} is a directory")
    if not stat.S_ISREG(st.st_mode):
        raise InvalidRequest(
            f"{path} is not a regular file (a FIFO, socket or device); "
            "the files API serves regular files, directories and symlinks only"
        )
    return st


def remove_tree(parent_fd: int, name: str) -> None:
    """Delete the directory `name` under parent_fd and everything in it, without recursion (a
    tree of any depth) and without following symlinks or entering other filesystems. Only one
    directory is open at a time; the way back up goes through `..`, checked against the
    identity recorded on the way down, so a directory moved mid-walk stops it instead of
    sending it above the tree."""
    fd = os.open(name, DIR_FLAGS, dir_fd=parent_fd)
    top = os.fstat(fd)
    # one level per directory on the current path: its name, (dev, ino), subdirectories left
    levels: list[tuple[str, tuple[int, int], list[str]]] = [(name, (top.st_dev, top.st_ino), [])]
    rounds = 0
    try:
        levels[-1][2].extend(_unlink_files(fd))
        while True:
            pending = levels[-1][2]
            if pending:
                child = pending.pop()
                try:
                    sub = os.open(child, DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    continue
                except OSError as e:  # swapped for a link or a file meanwhile: remove that
                    if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                        os.unlink(child, dir_fd=fd)
                    continue
                st = os.fstat(sub)
                if st.st_dev != top.st_dev:
                    os.close(sub)
                    raise InvalidRequest(f"{child!r} is a mount point; not removing across it")
                os.close(fd)
                fd = sub
                levels.append((child, (st.st_dev, st.st_ino), _unlink_files(fd)))
                continue
            if len(levels) == 1:
                break
            done = levels.pop()[0]
            up = os.open("..", DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = up
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != levels[-1][1]:
                raise PathOutsideSandbox(
                    f"a directory under {name!r} was moved while it was being removed"
                )
            try:
                os.rmdir(done, dir_fd=fd)
            except FileNotFoundError:
                pass
            except OSError as e:
                if e.errno != errno.ENOTEMPTY:
                    raise
                rounds += 1
                if rounds > REMOVE_RETRIES:
                    raise InvalidRequest(
                        f"{name!r} keeps being refilled while it is removed"
                    ) from None
                levels[-1][2].append(done)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent_fd)


def _unlink_files(dir_fd: int) -> list[str]:
    """Unlink everything in the directory that is not a directory; return the subdirectories."""
    subdirs = []
    with os.scandir(dir_fd) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                subdirs.append(entry.name)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.name, dir_fd=dir_fd)
    return subdirs
