"""The error tree: every error Pomona raises on purpose derives from PomonaError, an error that
crossed the REST API comes back as its own class, and the service answers each with its status."""

from __future__ import annotations

import ast
import builtins
import errno
import tempfile
from pathlib import Path

import pytest

import pomona
from pomona import errors
from pomona.orchestrator.server.errors import status_of

SRC = Path(pomona.__file__).parent
BUILTIN_ERRORS = {
    name
    for name, value in vars(builtins).items()  # warnings are not errors
    if isinstance(value, type)
    and issubclass(value, BaseException)
    and not issubclass(value, Warning)
}
SHIPPED = {Path("benchmarks/browser/sites/server.py")}  # run by the sandbox's python3, alone
SANDBOX_ERRORS = [
    c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.SandboxError)
]


def test_every_error_class_of_pomona_derives_from_pomona_error():
    """A class whose bases are all builtin exceptions is rooted nowhere in Pomona's tree (files
    shipped into sandboxes, `*/sandbox/*.py` and SHIPPED, run without Pomona and are left out);
    control flow that is no error derives from Signal."""
    unrooted = []
    for path in SRC.rglob("*.py"):
        if "sandbox" in path.relative_to(SRC).parts[:-1] or path.relative_to(SRC) in SHIPPED:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.bases:
                names = [b.id if isinstance(b, ast.Name) else ast.unparse(b) for b in node.bases]
                if all(n in BUILTIN_ERRORS for n in names):
                    unrooted.append(f"{path.relative_to(SRC)}: {node.name}({', '.join(names)})")
    assert sorted(unrooted) == [
        "errors.py: PomonaError(Exception)",
        "errors.py: Signal(BaseException)",
    ]


@pytest.mark.parametrize("cls", SANDBOX_ERRORS, ids=lambda c: c.__name__)
def test_a_service_error_comes_back_as_its_own_class(cls):
    sent = cls("what went wrong, and what to do")
    again = errors.error_named(type(sent).__name__, str(sent))
    assert type(again) is cls and str(again) == str(sent)


def test_an_unknown_error_name_keeps_its_name_and_is_a_sandbox_error():
    error = errors.error_named("FromANewerServer", "detail")
    assert type(error).__name__ == "FromANewerServer" and isinstance(error, errors.SandboxError)
    assert type(errors.error_named(None, "x")) is errors.SandboxError


@pytest.mark.parametrize(
    "cls, status",
    [
        (errors.InvalidRequest, 422),
        (errors.PathOutsideSandbox, 422),
        (errors.SandboxNotFound, 404),
        (errors.FileNotFoundInSandbox, 404),
        (errors.ImageNotFound, 404),
        (errors.JobNotFound, 404),
        (errors.SandboxConflict, 409),
        (errors.JobCancelled, 409),
        (errors.AuthenticationRequired, 401),
        (errors.PermissionDenied, 403),
        (errors.SourceNotAllowed, 403),
        (errors.TooLarge, 413),
        (errors.DiskFull, 413),
        (errors.WaitTimedOut, 408),
        (errors.Overloaded, 503),
        (errors.StoreUnavailable, 503),
        (errors.RuntimeUnavailable, 503),
        (errors.SandboxFailed, 500),
    ],
)
def test_each_error_has_its_status(cls, status):
    assert status_of(cls("x")) == status


def test_a_write_past_the_disk_quota_is_disk_full_and_still_the_os_error():
    """The local runtime's files API on a sandbox with a disk limit: the write that does not fit
    is a DiskFull (a TooLarge, 413 over HTTP) that still carries the kernel's errno."""
    from pomona import SandboxClient
    from pomona.orchestrator.runtimes.local import LocalRuntime

    state = tempfile.mkdtemp(prefix="pomona-diskfull-")
    try:
        with (
            SandboxClient("local", state_dir=state) as client,
            client.create_sandbox("host", disk="16Mi") as sandbox,
        ):
            with pytest.raises(errors.DiskFull, match="disk quota is full") as full:
                sandbox.write_file("big", b"\0" * (64 << 20))
            assert isinstance(full.value, errors.TooLarge) and isinstance(full.value, OSError)
            assert full.value.errno in (errno.ENOSPC, errno.EDQUOT)
            sandbox.remove("big")
            sandbox.write_file("small", b"fits")
            assert sandbox.read_file("small") == b"fits"
    finally:
        LocalRuntime(state).unmount_store()
