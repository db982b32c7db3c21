"""SIF files for tests, written from the format's public specification (Sylabs' SIF 01 layout,
as Apptainer writes it) around a real squashfs made by squashfs-tools' mksquashfs: the global
header, a table of 48 descriptors (a definition file, the primary system partition, a JSON
labels object), and the data objects each at a 4096-byte aligned offset. Apptainer itself is not
packaged for this machine; this writer is independent of the reader it tests (pomona's
orchestrator.linux.sif), sharing no code with it."""

from __future__ import annotations

import shutil
import struct
import subprocess
import uuid
from pathlib import Path

LAUNCH = b"#!/usr/bin/env run-singularity\n"
SLOTS = 48
DESCRIPTOR_BYTES = 585  # packed: int32, bool, 3 x uint32, 7 x int64, name[128], extra[384]
ALIGN = 4096


def busybox_tree(root: Path, env_lines: list[str] | None = None) -> Path:
    """A tiny root filesystem: static busybox and its applets, an os-release, Apptainer's env
    files, and a character device that must not survive the unpack."""
    (root / "bin").mkdir(parents=True)
    shutil.copy("/bin/busybox", root / "bin/busybox")
    for applet in ("sh", "ls", "cat", "echo", "id", "test", "env", "stat"):
        (root / "bin" / applet).symlink_to("busybox")
    (root / "etc").mkdir()
    (root / "etc/os-release").write_text('PRETTY_NAME="pomona sif"\n')
    env = root / ".singularity.d" / "env"
    env.mkdir(parents=True)
    (env / "10-docker2singularity.sh").write_text(
        "#!/bin/sh\n"
        'export PATH="/usr/local/bin:/usr/bin:/bin"\n'
        'export GREETING="${GREETING:-"hello from sif"}"\n'
    )
    (env / "90-environment.sh").write_text(
        "#!/bin/sh\n"
        + "\n".join(env_lines or ["export PROJECT=pomona", "export WHO=$(id -un)"])
        + "\n"
    )
    # outside /dev, which a sandbox gets of its own
    subprocess.run(["mknod", str(root / "etc" / "kmsg-copy"), "c", "1", "11"], check=True)
    return root


def squashfs(tree: Path, out: Path) -> Path:
    subprocess.run(
        ["mksquashfs", str(tree), str(out), "-noappend", "-quiet", "-no-progress"],
        check=True,
        capture_output=True,
    )
    return out


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _descriptor(kind: int, ident: int, offset: int, size: int, name: str, extra: bytes) -> bytes:
    return struct.pack(
        "<i?IIIqqqqqqq128s384s",
        kind,
        True,
        ident,
        0xF0000001,  # the default group
        0,  # linked to nothing
        offset,
        size,
        size,
        1700000000,
        1700000000,
        0,
        0,
        name.encode(),
        extra,
    )


def write_sif(
    partition: Path,
    out: Path,
    *,
    fstype: int = 1,
    parttype: int = 2,
    arch: bytes = b"02",
    version: bytes = b"01",
) -> Path:
    """A SIF file holding `partition` as its primary system partition (squashfs, amd64)."""
    objects = [
        (0x4001, "deffile", b"Bootstrap: scratch\n", b""),
        (0x4004, "rootfs", partition.read_bytes(), struct.pack("<ii3s", fstype, parttype, arch)),
        (0x4003, "labels", b'{"org.label-schema.name": "pomona-test"}', b""),
    ]
    descriptors_offset = ALIGN
    data_offset = _aligned(descriptors_offset + SLOTS * DESCRIPTOR_BYTES)
    table, data, cursor = b"", b"", data_offset
    for ident, (kind, name, body, extra) in enumerate(objects, start=1):
        table += _descriptor(kind, ident, cursor, len(body), name, extra)
        padded = body + b"\x00" * (_aligned(len(body)) - len(body))
        data += padded
        cursor += len(padded)
    table += b"\x00" * (DESCRIPTOR_BYTES * (SLOTS - len(objects)))
    assert len(table) == SLOTS * DESCRIPTOR_BYTES
    header = struct.pack(
        "<32s10s3s3s16sqqqqqqqq",
        LAUNCH,
        b"SIF_MAGIC\x00",
        version + b"\x00",
        arch + b"\x00",
        uuid.uuid4().bytes,
        1700000000,
        1700000000,
        SLOTS - len(objects),
        SLOTS,
        descriptors_offset,
        SLOTS * DESCRIPTOR_BYTES,
        data_offset,
        len(data),
    )
    blob = header + b"\x00" * (descriptors_offset - len(header)) + table
    blob += b"\x00" * (data_offset - len(blob)) + data
    out.write_bytes(blob)
    return out
