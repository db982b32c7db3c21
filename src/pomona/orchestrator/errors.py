"""Errors the sandbox layer raises: each says what went wrong and what to do about it.

Every class maps to one HTTP status so the service (and its remote client) can round-trip them.
"""

from __future__ import annotations


class PomonaError(Exception):
    """Base of every error Pomona raises on purpose."""

    status_code = 500


class InvalidRequest(PomonaError, ValueError):
    """The caller asked for something malformed (bad limit, bad path, bad mode)."""

    status_code = 422


class SandboxNotFound(PomonaError, LookupError):
    status_code = 404

    def __init__(self, sandbox_id: str):
        super().__init__(f"no sandbox with id {sandbox_id!r} (deleted, expired, or never created)")
        self.sandbox_id = sandbox_id


class SnapshotNotFound(PomonaError, LookupError):
    status_code = 404

    def __init__(self, snapshot_id: str):
        super().__init__(f"no snapshot with id {snapshot_id!r}")
        self.snapshot_id = snapshot_id


class SandboxConflict(PomonaError):
    """A create reused an id with a different spec, or the sandbox is in the wrong state."""

    status_code = 409


class ImageNotFound(PomonaError, LookupError):
    status_code = 404


class FileNotFoundInSandbox(PomonaError, FileNotFoundError):
    status_code = 404


class PathOutsideSandbox(InvalidRequest):
    """A path (or a symlink on the way to it) tried to leave the sandbox's root."""


class SourceNotAllowed(PomonaError):
    """A host path or image source the operator did not allow this caller (a 403 that never says
    whether the path or host exists)."""

    status_code = 403


class TooLarge(PomonaError):
    status_code = 413


class RuntimeUnavailable(PomonaError):
    """The runtime cannot work on this machine (missing binary, no engine running, ...)."""

    status_code = 503


class SandboxFailed(PomonaError):
    """The sandbox died or could not start; its message carries the runtime's own words."""

    status_code = 500
