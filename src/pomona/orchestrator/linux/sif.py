"""Apptainer/Singularity images as root filesystems, without Apptainer: a SIF file's primary
squashfs partition, or a sandbox directory (`apptainer build --sandbox`), as one overlay layer.

    sif:/path/image.sif     or any path ending in .sif
    sif:/path/sandbox-dir   an unpacked image (a root filesystem directory)

The SIF container format (Sylabs' specification, as Apptainer writes it; little-endian, packed):
a 128-byte global header — launch script [32], magic `SIF_MAGIC\\0` [10], version `01\\0` [3],
primary architecture [3], uuid [16], then eight int64: created, modified, descriptors free,
descriptors total, descriptors offset, descriptors size, data offset, data size — and at
`descriptors offset` an array of 585-byte descriptors: data type (int32), used (bool), id, group
and link (uint32), offset, size and padded size of the object (int64), created, modified, uid,
gid (int64), name [128], and 384 bytes of type-specific extra, which for a partition
(data type 0x4004) begins fs type (int32: 1 squashfs, 2 ext3, 5 encrypted squashfs), partition
type (int32: 2 the primary system) and architecture [3].

The partition is unpacked by squashfs-tools' `unsquashfs` reading straight from the SIF at the
partition's offset, as root so ownership survives, without xattrs (as OCI layers are unpacked),
and device nodes are dropped (a sandbox's /dev is its own). Cached by digest like every other
source: a SIF's digest is the sha256 of its partition (re-signing or relabelling a SIF does not
change its filesystem), remembered per (device, inode, size, mtime, ctime) so an unchanged file is
not read again; a sandbox directory's is the sha256 of its tree's metadata (paths, types, modes,
owners, sizes, mtimes, link targets), walked at each resolve. The image's environment is what
Apptainer's build wrote from the OCI config (`.singularity.d/env/10-docker*.sh`) and the
literal `export NAME=value` lines of `%environment` (`90-environment.sh`); other shell code there
is not run.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import stat
import struct
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pomona.errors import InvalidRequest, RuntimeUnavailable

MAGIC = b"SIF_MAGIC\x00"
HEADER = struct.Struct("<32s10s3s3s16s8q")
DESCRIPTOR = struct.Struct("<i?3I7q128s384s")
PARTITION = struct.Struct("<ii3s")
DATA_PARTITION = 0x4004
FS_SQUASH, FS_EXT3, FS_ENCRYPTED = 1, 2, 5
PART_PRIMARY = 2
ARCHES = {"01": "i386", "02": "x86_64", "03": "arm", "04": "aarch64", "05": "ppc64",
          "06": "ppc64le", "11": "s390x", "12": "riscv64"}  # fmt: skip
MAX_DESCRIPTORS = 4096
SQUASHFS_MAGIC = b"hsqs"
ENV_FILES = ("10-docker2singularity.sh", "10-docker.sh", "90-environment.sh")
_EXPORT = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


@dataclass(frozen=True)
class Partition:
    offset: int
    size: int
    fstype: int
    arch: str  # the machine name (x86_64...), or the SIF's own code when unknown


def read_partition(fd: int, name: str) -> Partition:
    """The primary system partition of the SIF open at `fd`, checked against the file's size."""
    size = os.fstat(fd).st_size
    head = os.pread(fd, HEADER.size, 0)
    if len(head) < HEADER.size or head[32:42] != MAGIC:
        raise InvalidRequest(f"{name} is not a SIF file (no SIF_MAGIC at byte 32)")
    _, _, version, _, _, *numbers = HEADER.unpack(head)
    total, offset, length = numbers[3], numbers[4], numbers[5]
    if version.rstrip(b"\x00") != b"01":
        raise InvalidRequest(f"{name}: SIF version {version!r} is not 01, the one Pomona reads")
    if (
        not 0 < total <= MAX_DESCRIPTORS
        or length != total * DESCRIPTOR.size
        or offset < HEADER.size
        or offset + length > size
    ):
        raise InvalidRequest(f"{name}: its descriptor table lies outside the file")
    table = os.pread(fd, total * DESCRIPTOR.size, offset)
    for i in range(total):
        kind, used, _, _, _, obj_offset, obj_size, *_, extra = DESCRIPTOR.unpack_from(
            table, i * DESCRIPTOR.size
        )
        if not used or kind != DATA_PARTITION:
            continue
        fstype, parttype, arch = PARTITION.unpack_from(extra)
        if parttype != PART_PRIMARY:
            continue
        if obj_offset < 0 or obj_size <= 0 or obj_offset + obj_size > size:
            raise InvalidRequest(f"{name}: its primary partition lies outside the file")
        code = arch.rstrip(b"\x00").decode(errors="replace")
        return Partition(obj_offset, obj_size, fstype, ARCHES.get(code, code))
    raise InvalidRequest(f"{name}: the SIF has no primary system partition")


def check_partition(fd: int, part: Partition, name: str) -> None:
    """Refuse, in words, what cannot be unpacked here."""
    if part.fstype == FS_EXT3:
        raise InvalidRequest(
            f"{name}: its root filesystem is ext3 (a writable image of Singularity 2); convert it"
            " where Apptainer is installed: apptainer build new.sif " + shlex.quote(name)
        )
    if part.fstype == FS_ENCRYPTED:
        raise InvalidRequest(f"{name}: its root filesystem is encrypted; Pomona has no key for it")
    if part.fstype != FS_SQUASH or os.pread(fd, 4, part.offset) != SQUASHFS_MAGIC:
        raise InvalidRequest(f"{name}: its primary partition is not a squashfs filesystem")
    machine = os.uname().machine
    if part.arch != machine and part.arch in ARCHES.values():
        raise InvalidRequest(f"{name} is built for {part.arch}; this machine is {machine}")


def partition_digest(fd: int, part: Partition) -> str:
    hasher = hashlib.sha256()
    done = 0
    while done < part.size:
        chunk = os.pread(fd, min(1 << 22, part.size - done), part.offset + done)
        if not chunk:
            raise InvalidRequest("the SIF file ended inside its partition")
        hasher.update(chunk)
        done += len(chunk)
    return "sha256:" + hasher.hexdigest()


def file_digest(fd: int, name: str, memo_dir: Path) -> str:
    """The partition's digest, from the memo while the file's identity and times are unchanged."""
    st = os.fstat(fd)
    identity = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    memo = memo_dir / (hashlib.sha256(json.dumps(identity).encode()).hexdigest() + ".json")
    try:
        known = json.loads(memo.read_text())
        if known.get("identity") == identity:
            return str(known["digest"])
    except (OSError, ValueError, KeyError):
        pass
    part = read_partition(fd, name)
    check_partition(fd, part, name)
    digest = partition_digest(fd, part)
    memo_dir.mkdir(parents=True, exist_ok=True)
    tmp = memo.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"identity": identity, "digest": digest}))
    tmp.replace(memo)
    return digest


def tree_digest(fd: int) -> str:
    """The sha256 of a directory tree's metadata (never its contents: a resolve stays cheap)."""
    hasher = hashlib.sha256()
    root = f"/proc/self/fd/{fd}"
    for top, dirs, files in os.walk(root):
        dirs.sort()
        for entry in sorted([*dirs, *files]):
            path = os.path.join(top, entry)
            st = os.lstat(path)
            link = os.readlink(path) if stat.S_ISLNK(st.st_mode) else ""
            rel = os.path.relpath(path, root)
            hasher.update(
                f"{rel}\0{st.st_mode}\0{st.st_uid}\0{st.st_gid}\0{st.st_size}\0"
                f"{st.st_mtime_ns}\0{st.st_rdev}\0{link}\n".encode(errors="surrogateescape")
            )
    return "sha256:" + hasher.hexdigest()


def digest(fd: int, name: str, memo_dir: Path) -> str:
    """What the SIF file or sandbox directory open at `fd` stands for now."""
    if stat.S_ISDIR(os.fstat(fd).st_mode):
        return tree_digest(fd)
    return file_digest(fd, name, memo_dir)


def _tool(name: str) -> str:
    for directory in ("/usr/bin", "/usr/sbin", "/bin", "/sbin"):
        if os.access(f"{directory}/{name}", os.X_OK):
            return f"{directory}/{name}"
    raise RuntimeUnavailable(
        f"SIF images are unpacked with {name}: apt-get install squashfs-tools (./dev setup)"
    )


def _checked(argv: list[str], name: str, fds: tuple[int, ...] = ()) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, pass_fds=fds)
    if done.returncode != 0:
        raise InvalidRequest(
            f"{name}: {argv[0]} failed: {(done.stderr or done.stdout).strip()[-400:]}"
        )


def unpack(fd: int, name: str, dest: Path) -> None:
    """Fill the empty directory `dest` with the image's root filesystem."""
    source = f"/proc/self/fd/{fd}"
    if stat.S_ISDIR(os.fstat(fd).st_mode):
        _checked(["cp", "-a", "--reflink=auto", f"{source}/.", str(dest)], name, (fd,))
    else:
        part = read_partition(fd, name)
        check_partition(fd, part, name)
        dest.rmdir()  # unsquashfs makes it
        _checked(
            [_tool("unsquashfs"), "-no-xattrs", "-quiet", "-no-progress", "-strict-errors",
             "-offset", str(part.offset), "-dest", str(dest), source],
            name,
            (fd,),
        )  # fmt: skip
    drop_devices(dest)


def drop_devices(root: Path) -> None:
    for top, _, files in os.walk(root):
        for entry in files:
            path = os.path.join(top, entry)
            if stat.S_ISCHR(os.lstat(path).st_mode) or stat.S_ISBLK(os.lstat(path).st_mode):
                os.unlink(path)


_DEFAULTED = re.compile(r'^"\$\{([A-Za-z_][A-Za-z0-9_]*):-"((?:[^"\\]|\\.)*)"\}"$')


def _literal(value: str, env: dict[str, str]) -> str | None:
    """The value of a shell assignment's right side when it is a literal (quoted or not), or
    Apptainer's `"${NAME:-"default"}"` form; None for anything that needs a shell."""
    value = value.strip()
    default = _DEFAULTED.match(value)
    if default:
        return env.get(default.group(1)) or re.sub(r"\\(.)", r"\1", default.group(2))
    try:
        words = shlex.split(value, posix=True)
    except ValueError:
        return None
    if len(words) != 1 or any(c in value for c in "$`"):
        return None
    return words[0]


def environment(root: Path) -> dict[str, str]:
    """The image's environment from its Apptainer env files (literal assignments only)."""
    env: dict[str, str] = {}
    base = root / ".singularity.d" / "env"
    for file in ENV_FILES:
        path = base / file
        # the image's own file only: a link anywhere on the way could lead to the host's
        if not path.is_file() or not path.resolve().is_relative_to(root.resolve()):
            continue
        for line in path.read_text(errors="replace").splitlines():
            match = _EXPORT.match(line)
            if match and (value := _literal(match.group(2), env)) is not None:
                env[match.group(1)] = value
    return env


def fetch(
    fd: int, name: str, stage: Callable[[str, Callable[[Path], None]], Path], memo_dir: Path
) -> tuple[str, Path, dict[str, str]]:
    """Unpack (once per digest) the image open at `fd` through the store's `stage`; returns the
    digest, the layer directory and the environment."""
    found = digest(fd, name, memo_dir)
    layer = stage(found, lambda dest: unpack(fd, name, dest))
    return found, layer, environment(layer)
