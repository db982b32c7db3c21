"""Every error Pomona raises on purpose, in one tree, so `except PomonaError` catches all of them
and nothing else. Each says what went wrong and what to do about it.

    PomonaError
    ├── UsageError (ValueError)           a benchmark, task, harness, model or option that does not
    │   │                                 exist or does not fit with the others
    │   └── Unknown (KeyError)            a name that does not exist
    ├── MissingExtra (RuntimeError)       an optional dependency is not installed
    ├── EpisodeFailure                    an attempt ends with a typed failure kind (FailureKind):
    │   ├── AgentFailure                  benchmarks.browser.loop: the model was unreachable or failed
    │   ├── VerifierError                 benchmarks.task: no trustworthy verdict (never a 0)
    │   │   └── ServiceDown               benchmarks.claw.runtime: a task's mock services died
    │   ├── TaskSetupFailed (RuntimeError) benchmarks.task: a task's own set-up failed in its sandbox
    │   └── BrowserInfraError             browser_env.errors: the browser failed under the agent
    │       └── BrowserCrashed, PageHung
    ├── SandboxError                      the sandbox layer: SDK, service and runtimes
    │   ├── InvalidRequest (ValueError)   malformed input: a limit, path, id, mode, size
    │   │   └── PathOutsideSandbox        a path (or a link on its way) tries to leave the sandbox
    │   ├── NotFound (LookupError)        no such thing, or not the caller's
    │   │   ├── SandboxNotFound, SnapshotNotFound, JobNotFound, ImageNotFound
    │   │   └── FileNotFoundInSandbox (FileNotFoundError)
    │   ├── SandboxConflict               an id reused with another spec, a snapshot in use
    │   ├── JobCancelled                  the job was cancelled before it finished
    │   ├── AuthenticationRequired        no API key
    │   ├── PermissionDenied              a key the service does not know, or not allowed this
    │   │   └── SourceNotAllowed          a host path or image source the operator did not allow
    │   ├── TooLarge                      a body, file or archive over a limit
    │   │   └── DiskFull (OSError)        a write the sandbox's disk quota has no room for
    │   ├── WaitTimedOut                  a server-side wait expired; the work itself goes on
    │   ├── Overloaded                    admission control turned the request away: retry
    │   ├── QuotaExceeded                 the key holds its maximum (sandboxes, CPU, memory)
    │   ├── StoreUnavailable              the service's state store is away: retry
    │   ├── ServiceUnreachable            the SDK cannot reach the service, or lost its answer
    │   ├── RuntimeUnavailable            the runtime cannot work on this machine
    │   ├── ClientClosed (RuntimeError)   the client used before start() or after close()
    │   └── SandboxFailed                 the sandbox died or could not start
    │
    │   (the rest live beside the code that raises them)
    ├── InstallError (RuntimeError)       harnesses.payload: an install step failed
    │   └── Unavailable                   the harness cannot be installed on this machine
    ├── McpUnsupported (ValueError)       harnesses.mcp: the harness has no MCP client to configure
    ├── MissingDistribution (LookupError) benchmarks.pytools: a test dependency Pomona lacks
    ├── TaskBuildError (RuntimeError)     benchmarks.swebench.task_sets: a local task set did not build
    ├── ActionError (ValueError)          browser_env.errors: an action that does not parse
    │   └── NavigationFailed
    ├── ImageBuildError (RuntimeError)    browser_env.image: a step of the image build failed
    ├── ArtifactRefused                   viewer.artifacts: not a file the viewer may serve
    └── ProxyError                        proxy.errors: answered in the caller's own dialect
        ├── BadRequest ...                the request cannot be served as sent (4xx)
        ├── ClientGone                    the client hung up before its answer
        └── UpstreamError                 the upstream (or the policy) failed

The sandbox layer's errors live here (the SDK, the service and every runtime raise them, and
`except SandboxError` around sandbox work means "the sandbox failed us", apart from a verifier's
or a harness's failure). Constructors are plain (one message), so an error that crossed the REST API is
rebuilt as its own class by `error_named`. How each maps to an HTTP status is the service's
business (pomona.orchestrator.server.errors).
"""

from __future__ import annotations

import functools
import sys
from typing import Literal

FailureKind = Literal["none", "sandbox", "harness", "proxy", "upstream", "verifier", "timeout"]
"""Why an episode did not produce a trustworthy reward (`none`: it did): the `failure_kind` of
its `episodes` row, one type in every layer. Infra failures are data, never a reward of 0."""


class PomonaError(Exception):
    """Base of every error Pomona raises on purpose."""


class Signal(BaseException):
    """Control flow, not an error: it must pass through the `except Exception` of code Pomona
    calls but does not own (a benchmark's own retry loop), so it is no PomonaError."""


class EpisodeFailure(PomonaError):
    """An episode cannot go on, for a reason of kind `kind`: the base of the errors the layers
    under the episode engine raise to end an attempt with a typed failure instead of a crash."""

    kind: FailureKind = "harness"

    def __init__(self, message: str, kind: FailureKind | None = None):
        super().__init__(message)
        if kind is not None:
            self.kind = kind


class UsageError(PomonaError, ValueError):
    """What the caller asked for does not exist or does not fit together (a benchmark, task,
    harness, model or option): said in words before anything runs."""


class Unknown(UsageError, KeyError):
    """A name that does not exist (a task, task set, harness, benchmark, option); the message
    lists the ones that do."""

    def __str__(self) -> str:  # KeyError's own quotes the message
        return str(self.args[0]) if self.args else ""


class NoData(UsageError, FileNotFoundError):
    """A path the caller gave holds none of what was asked for (no trajectory directory, no
    exported set, no Orchard parquet)."""


class SystemCallFailed(PomonaError, OSError):
    """A system call, or the system library that makes it (libseccomp), failed; its errno is
    OSError's, so callers that test it keep working."""


class MissingExtra(PomonaError, RuntimeError):
    """An optional dependency is not installed; the message names the extra that brings it."""


class SandboxError(PomonaError):
    """Base of what the sandbox layer raises: the SDK, the service, the runtimes."""


class InvalidRequest(SandboxError, ValueError):
    """The caller asked for something malformed (bad limit, bad path, bad mode)."""


class PathOutsideSandbox(InvalidRequest):
    """A path (or a symlink on the way to it) tried to leave the sandbox's root."""


class NotFound(SandboxError, LookupError):
    """No such thing; for the service, also "not yours" (it never says which)."""


class SandboxNotFound(NotFound):
    @classmethod
    def of(cls, sandbox_id: str) -> SandboxNotFound:
        return cls(f"no sandbox with id {sandbox_id!r} (deleted, expired, or never created)")


class SnapshotNotFound(NotFound):
    @classmethod
    def of(cls, snapshot_id: str) -> SnapshotNotFound:
        return cls(f"no snapshot with id {snapshot_id!r}")


class JobNotFound(NotFound):
    @classmethod
    def of(cls, job_id: str) -> JobNotFound:
        return cls(
            f"no job with id {job_id!r} (finished jobs are kept 1 h, and 10 min after "
            "their sandbox is deleted)"
        )


class ImageNotFound(NotFound):
    """An image no allowed source has."""


class FileNotFoundInSandbox(NotFound, FileNotFoundError):
    """A path that does not exist inside the sandbox."""


class SandboxConflict(SandboxError):
    """A create reused an id with a different spec, or the sandbox is in the wrong state."""


class JobCancelled(SandboxError):
    """The job was cancelled before it finished."""


class AuthenticationRequired(SandboxError):
    """The service needs an API key and none came."""


class PermissionDenied(SandboxError):
    """The key is unknown, or the caller may not do this."""


class SourceNotAllowed(PermissionDenied):
    """A host path or image source the operator did not allow this caller (it never says
    whether the path or host exists)."""


class TooLarge(SandboxError):
    """A request body, file or archive over its limit."""


class DiskFull(TooLarge, OSError):
    """A write the sandbox's disk (its quota) has no room for; still the OSError it was, with
    its errno (ENOSPC or EDQUOT), so callers that test it keep working."""


class WaitTimedOut(SandboxError):
    """A server-side wait expired; the operation itself goes on. `job_id` names the job."""

    def __init__(self, message: str, *, job_id: str | None = None):
        super().__init__(message)
        self.job_id = job_id


class Overloaded(SandboxError):
    """Admission control turned the request away before anything ran: retry later."""


class QuotaExceeded(SandboxError):
    """The API key already holds what its quota allows (live sandboxes, CPU, memory): delete
    some first. Not retried by the SDK: waiting does not free a quota."""


class StoreUnavailable(SandboxError):
    """The service's state store is unreachable: retry shortly."""


class ServiceUnreachable(SandboxError):
    """The SDK could not reach the service (or lost the answer of a call it may not repeat)."""


class RuntimeUnavailable(SandboxError):
    """The runtime cannot work on this machine (missing binary, no engine running, ...)."""


class ClientClosed(SandboxError, RuntimeError):
    """The SDK client (or service) was used before it started or after it closed."""


class SandboxFailed(SandboxError):
    """The sandbox died or could not start; its message carries the runtime's own words."""


def error_named(name: str | None, message: str) -> PomonaError:
    """The error a name stands for (the `error` of a service's error body, a job's error type),
    as its own class with `message`; a name this version does not know becomes a SandboxError
    subclass of that name, so it still shows."""
    return _class_named(name or "SandboxError")(message)


@functools.lru_cache(maxsize=64)
def _class_named(name: str) -> type[PomonaError]:
    found = getattr(sys.modules[__name__], name, None)
    if isinstance(found, type) and issubclass(found, PomonaError):
        return found
    return type(name, (SandboxError,), {"__module__": __name__})
