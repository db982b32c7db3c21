"""Where an image may come from: the operator's allow-list, checked before anything is opened
or connected to.

In-process (the operator's own code) every source is allowed, but an archive is still only ever
a regular file of bounded size. Behind `pomona serve`, archives are read only from directories
given at start (`--image-dir`) and registries contacted only when named at start
(`--registry`); any other reference is refused with the same words whether or not the file or
host exists, so a tenant can neither probe the host nor make the orchestrator connect anywhere.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass

from pomona.errors import InvalidRequest, SourceNotAllowed

MAX_ARCHIVE_BYTES = 16 * 2**30
ARCHIVE_PREFIX = re.compile(r"^(docker|oci)-archive:")
SIF_PREFIX = "sif:"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
# The distribution reference grammar: [host[:port]/]name[/name...][:tag][@sha256:digest]
REFERENCE = re.compile(
    rf"^(?:[a-zA-Z0-9](?:[a-zA-Z0-9.-]*[a-zA-Z0-9])?(?::[0-9]{{1,5}})?/)?{_COMPONENT}"
    rf"(?:/{_COMPONENT})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?(?:@sha256:[0-9a-f]{{64}})?$"
)


def archive_path(ref: str) -> str | None:
    """The file an archive reference names, or None when the reference is not an archive."""
    path = ARCHIVE_PREFIX.sub("", ref)
    return path if path != ref or ref.endswith(".tar") else None


def sif_path(ref: str) -> str | None:
    """The SIF file or sandbox directory an Apptainer reference names (`sif:PATH`, or a path
    ending in .sif), or None."""
    if ref.startswith(SIF_PREFIX):
        return ref[len(SIF_PREFIX) :]
    return ref if ref.endswith(".sif") and "/" in ref else None


def local_path(ref: str) -> str | None:
    """The file (or directory) on this machine an image reference names, or None."""
    return archive_path(ref) or sif_path(ref)


def registry_host(ref: str) -> str | None:
    """The registry host[:port] of a reference like `localhost:5000/name:tag`, or None for a
    bare name (`debian:12`), which only the engine's own image store is asked for."""
    host, _, rest = ref.partition("/")
    return host if rest and ("." in host or ":" in host or host == "localhost") else None


@dataclass(frozen=True)
class ImageSources:
    """None means unrestricted; a tuple is the allow-list (possibly empty: nothing)."""

    archive_dirs: tuple[str, ...] | None = None
    registries: tuple[str, ...] | None = None
    max_archive_bytes: int = MAX_ARCHIVE_BYTES

    @classmethod
    def restricted(
        cls,
        archive_dirs: list[str] | None = None,
        registries: list[str] | None = None,
        max_archive_bytes: int = MAX_ARCHIVE_BYTES,
    ) -> ImageSources:
        dirs = tuple(os.path.realpath(d) for d in archive_dirs or ())
        return cls(dirs, tuple(r.lower() for r in registries or ()), max_archive_bytes)

    def check(self, ref: str) -> None:
        """Refuse, before any I/O, a reference whose source is not allowed."""
        if "\x00" in ref or not ref.strip() or len(ref) > 4096:
            raise InvalidRequest("the image reference is empty, too long or holds a NUL byte")
        path = local_path(ref)
        if path is None and ref != "host" and not REFERENCE.match(ref):
            raise InvalidRequest(
                f"{ref[:200]!r} is not an image reference: write host, name[:tag], "
                "registry[:port]/name[:tag][@sha256:...], oci-archive:PATH or sif:PATH"
            )
        if path is not None:
            if self.archive_dirs is not None and not any(
                os.path.realpath(path).startswith(d.rstrip("/") + "/") for d in self.archive_dirs
            ):
                raise SourceNotAllowed(
                    "image archives are read only from the directories this service was started "
                    "with (--image-dir); this reference is not under one of them"
                )
            return
        host = registry_host(ref)
        if host is not None and not self.registry_allowed(host):
            raise SourceNotAllowed(
                "images are pulled only from the registries this service was started with "
                "(--registry); this reference names another"
            )

    def registry_allowed(self, host: str) -> bool:
        return self.registries is None or host.lower() in self.registries

    def open_archive(self, ref: str, directory: bool = False) -> int:
        """Open an allowed archive: a regular file (never a device or FIFO, which would block or
        never end) of at most max_archive_bytes, or with `directory` also a directory (an
        Apptainer sandbox). Returns the fd."""
        self.check(ref)
        path = local_path(ref) or ref
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        except FileNotFoundError:
            from pomona.errors import ImageNotFound

            raise ImageNotFound(f"image archive {path} does not exist") from None
        except OSError as e:
            raise InvalidRequest(f"image archive {path} cannot be opened: {e.strerror}") from None
        st = os.fstat(fd)
        if directory and stat.S_ISDIR(st.st_mode):
            return fd
        if not stat.S_ISREG(st.st_mode) or st.st_size > self.max_archive_bytes:
            os.close(fd)
            raise InvalidRequest(
                f"image archive {path} is not a regular file of at most "
                f"{self.max_archive_bytes} bytes"
            )
        os.set_blocking(fd, True)
        return fd
