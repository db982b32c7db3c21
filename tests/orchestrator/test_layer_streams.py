"""A layer's bytes arrive gzipped or plain, from a file or from a stream that cannot seek back (a
registry response): the tar inside reads the same every way."""

from __future__ import annotations

import gzip
import io
import tarfile
from typing import IO

import pytest

from pomona.orchestrator.linux.images import _decompressed


def _layer() -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        data = b"layer content\n" * 1000
        info = tarfile.TarInfo("etc/greeting")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


class Unseekable(io.RawIOBase):
    """Bytes handed out in small, uneven reads, with no way back (as an HTTP body)."""

    def __init__(self, data: bytes):
        self.data = data

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        n = min(len(buffer), 7, len(self.data))
        buffer[:n], self.data = self.data[:n], self.data[n:]
        return n


@pytest.mark.parametrize("compressed", [True, False], ids=["gzip", "plain"])
@pytest.mark.parametrize("seekable", [True, False], ids=["file", "stream"])
def test_the_tar_inside_reads_the_same(compressed: bool, seekable: bool) -> None:
    data = gzip.compress(_layer()) if compressed else _layer()
    raw: IO[bytes] = io.BytesIO(data) if seekable else io.BufferedReader(Unseekable(data), 1)
    assert raw.seekable() is seekable
    with tarfile.open(fileobj=_decompressed(raw), mode="r|") as tar:
        member = tar.next()
        assert member is not None and member.name == "etc/greeting"
        extracted = tar.extractfile(member)
        assert extracted is not None and extracted.read() == b"layer content\n" * 1000
