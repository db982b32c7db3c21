"""Archives a caller uploads into a sandbox, made safe before an engine unpacks them: the
docker and kubernetes runtimes hand an upload to something that resolves paths inside the
container and follows its links, so the archive itself must not lead out (the local runtime
unpacks through its own descriptors, linux/safefs.py)."""

from __future__ import annotations

import io
import tarfile

from pomona.errors import InvalidRequest, PathOutsideSandbox


def clean_archive(data: bytes, uid: int) -> tuple[bytes, set[str]]:
    """An upload, rewritten so it cannot leave its target: no absolute or `..` members, nothing
    through a link the archive itself made, no devices or fifos, hard links as copies, every
    member owned by the sandbox user. Returns the clean tar and the existing-path prefixes the
    caller must check are not symlinks."""
    out = io.BytesIO()
    try:
        source = tarfile.open(fileobj=io.BytesIO(data), mode="r:*")
    except tarfile.TarError as e:
        raise InvalidRequest(f"not a tar archive: {e}") from None
    declared: dict[str, str] = {}
    check: set[str] = set()
    with source, tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as target:
        for member in source:
            parts = [p for p in member.name.split("/") if p not in ("", ".")]
            if member.name.startswith("/") or ".." in parts:
                raise PathOutsideSandbox(
                    f"archive member {member.name!r} points outside the target"
                )
            if not parts:
                continue
            for i in range(1, len(parts)):
                prefix = "/".join(parts[:i])
                kind = declared.get(prefix)
                if kind is None:
                    check.add(prefix)
                elif kind != "dir":
                    raise PathOutsideSandbox(
                        f"archive member {member.name!r} goes through {prefix!r}, which is not a directory"
                    )
            name = "/".join(parts)
            declared[name] = "dir" if member.isdir() else "link" if member.issym() else "file"
            clean = tarfile.TarInfo(name)
            clean.uid = clean.gid = uid
            clean.mtime = member.mtime
            payload = None
            if member.isdir():
                clean.type, clean.mode = tarfile.DIRTYPE, member.mode & 0o777
            elif member.issym():
                clean.type, clean.mode, clean.linkname = tarfile.SYMTYPE, 0o777, member.linkname
            elif member.isfile() or member.islnk():
                f = source.extractfile(member)
                content = f.read() if f else b""
                clean.mode, clean.size = member.mode & 0o777, len(content)
                payload = io.BytesIO(content)
            else:
                continue
            target.addfile(clean, payload)
    return out.getvalue(), check
