"""The typed records of the sandbox contract, shared by runtimes, the SDK and the REST API.

These are pydantic models so the service's OpenAPI document is generated from them.
"""

from __future__ import annotations

import os
import re
from enum import StrEnum
from typing import Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from pomona.errors import InvalidRequest

DEFAULT_OUTPUT_CAP = 10 * 1024 * 1024
SANDBOX_UID = 1000  # the default user, "pomona", on every runtime
SANDBOX_HOME = "/home/pomona"
M = TypeVar("M", bound="BaseModel")
ID_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
          "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}  # fmt: skip


def parse_bytes(value: int | str | None) -> int | None:
    """Accept 536870912, "512Mi", "512m" or "1.5G" (Kubernetes and Docker spellings)."""
    if value is None or isinstance(value, int):
        return value
    if not isinstance(value, str):
        raise InvalidRequest(
            f"cannot read {value!r} as a size; write e.g. 536870912, '512Mi' or '2G'"
        )
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgt]i?)?b?\s*", value.lower())
    if not match:
        raise InvalidRequest(
            f"cannot read {value!r} as a size; write e.g. 536870912, '512Mi' or '2G'"
        )
    return int(float(match.group(1)) * _UNITS[match.group(2) or ""])


def check_id(sandbox_id: str, what: str = "sandbox id") -> str:
    if not ID_PATTERN.match(sandbox_id):
        raise InvalidRequest(
            f"{what} {sandbox_id!r} is invalid: use 1-63 of a-z 0-9 _ . - starting with a letter or digit"
        )
    return sandbox_id


def validated(model: type[M], **data: object) -> M:
    """Build a model from SDK arguments; invalid input raises InvalidRequest saying what to fix."""
    try:
        return model(**data)
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or model.__name__}: {err['msg'].removeprefix('Value error, ')}"
            for err in e.errors()
        )
        raise InvalidRequest(f"invalid {model.__name__}: {problems}") from None


def check_text(value: object, where: str = "input") -> None:
    """Refuse lone surrogates anywhere in a request: valid JSON can carry them, but no file
    name, command or label can hold them, and every later encode would fail with a 500."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise InvalidRequest(
                    f"{where} holds a lone UTF-16 surrogate, which is not text"
                ) from None
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)


class Request(BaseModel):
    """A model built from a caller's input: its strings are checked to be text first."""

    @model_validator(mode="before")
    @classmethod
    def _text_only(cls, data: object) -> object:
        try:
            check_text(data)
        except InvalidRequest as e:
            raise ValueError(str(e)) from None
        return data


class NetworkMode(StrEnum):
    none = "none"  # loopback only
    gateway = "gateway"  # loopback, plus one allowed host:port reachable at 127.0.0.1:<port>
    full = "full"  # the host's network


class Limits(Request):
    """Resource limits. None means the service's default (DEFAULT_LIMITS, as the operator set
    them); a sandbox never runs without limits unless the operator turned the defaults off."""

    model_config = ConfigDict(extra="forbid")
    cpu: float | None = Field(
        default=None, ge=0.01, le=4096, description="CPU cores, e.g. 0.5 or 2 (cgroups: >= 0.01)"
    )
    memory: int | None = Field(
        default=None, gt=4 * 2**20, le=2**60, description="bytes; '512Mi' is accepted"
    )
    pids: int | None = Field(
        default=None, ge=8, le=4194304, description="max processes and threads"
    )
    disk: int | None = Field(
        default=None, gt=2**20, le=2**60, description="bytes of writable layer; '1Gi' is accepted"
    )

    @field_validator("memory", "disk", mode="before")
    @classmethod
    def _bytes(cls, value: int | str | None) -> int | None:
        return parse_bytes(value)


# What a sandbox gets for each limit it does not set (capped by what the machine has): enough
# for a SWE-bench build or a browser, not enough for one sandbox to take the machine.
DEFAULT_LIMITS = Limits(cpu=2, memory=4 * 2**30, pids=4096, disk=10 * 2**30)
MAX_TTL = 7 * 24 * 3600.0  # a sandbox's TTL at most, and what timeout=None means


def named_sources() -> dict[str, str]:
    """Host directories a mount may name instead of giving a path; the side that runs the
    runtime resolves them, so a service's tenants never send a host path for the payload."""
    return {"tools": os.environ.get("POMONA_TOOLS_DIR", "/var/cache/pomona/tools")}


class Mount(Request):
    """A host path made visible inside the sandbox, e.g. the harness payload at /opt/pomona/tools."""

    model_config = ConfigDict(extra="forbid")
    source: str = Field(
        description='absolute host path (operators only), or a named source: "tools" '
        "(the harness payload)"
    )
    target: str = Field(description="absolute path inside the sandbox")
    read_only: bool = True

    @field_validator("source", "target")
    @classmethod
    def _absolute(cls, value: str, info: ValidationInfo) -> str:
        if info.field_name == "source" and value in named_sources():
            return value
        if not value.startswith("/") or ".." in value.split("/") or "\x00" in value:
            raise ValueError(
                f"{value!r} must be an absolute path without '..'"
                + (
                    f" or one of the named sources {sorted(named_sources())}"
                    if info.field_name == "source"
                    else ""
                )
            )
        return value

    @property
    def named(self) -> bool:
        return not self.source.startswith("/")

    def host_path(self) -> str:
        """Where the source is on the host: the path itself, or what its name stands for."""
        return named_sources()[self.source] if self.named else self.source


def check_env(env: dict[str, str]) -> dict[str, str]:
    """Names and values a process environment can hold (the OS refuses the rest, later and less clearly)."""
    for name, value in env.items():
        if not name or "=" in name or "\0" in name or "\0" in value:
            raise InvalidRequest(
                f"environment variable {name!r}: names must be non-empty without '=' or "
                "NUL, and values without NUL"
            )
    return env


class SandboxSpec(Request):
    """What a sandbox is made of. Creating the same id twice with the same spec is a no-op."""

    model_config = ConfigDict(extra="forbid")
    image: str = Field(
        default="host", description='"host" (the host root, read-only) or an OCI image reference'
    )
    network: NetworkMode = NetworkMode.none
    gateway: str | None = Field(
        default=None, description="host:port reachable in gateway mode, at 127.0.0.1:<port> inside"
    )
    limits: Limits = Field(default_factory=Limits)
    timeout: float | None = Field(
        default=3600,
        gt=0,
        allow_inf_nan=False,
        description="TTL in seconds; heartbeats extend it; null is the longest the service "
        "allows (7 days in-process, the key's maximum TTL over REST)",
    )
    labels: dict[str, str] = Field(default_factory=dict)
    user: Literal["pomona", "root"] = "pomona"
    env: dict[str, str] = Field(default_factory=dict)
    workdir: str = "/workspace"

    @field_validator("workdir")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/") or "\0" in value:
            raise ValueError(f"workdir must be an absolute path, not {value!r}")
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        return check_env(value)

    mounts: list[Mount] = Field(default_factory=list, description="host paths bound inside")

    def model_post_init(self, __context: object) -> None:
        if self.network == NetworkMode.gateway:
            if not self.gateway or not re.fullmatch(r"[A-Za-z0-9_.-]+:[0-9]{1,5}", self.gateway):
                raise InvalidRequest(
                    "network='gateway' needs gateway='host:port' (the one reachable endpoint)"
                )
            if not 0 < self.gateway_address[1] < 65536:
                raise InvalidRequest(
                    f"gateway port {self.gateway_address[1]} is out of range (1-65535)"
                )
        elif self.gateway:
            raise InvalidRequest(
                f"gateway= is only meaningful with network='gateway', not {self.network!r}"
            )

    @property
    def gateway_address(self) -> tuple[str, int]:
        host, port = (self.gateway or ":0").rsplit(":", 1)
        return host, int(port)


SandboxStatus = Literal["creating", "ready", "failed", "deleted"]


class SandboxInfo(BaseModel):
    id: str
    runtime: str
    status: SandboxStatus
    spec: SandboxSpec
    created_at: float
    expires_at: float | None = None
    snapshot: str | None = Field(
        default=None, description="the snapshot this sandbox was forked from"
    )
    message: str | None = None


class ExecRequest(Request):
    model_config = ConfigDict(extra="forbid")
    command: str | list[str] = Field(
        description="a shell string (run by bash -c, or sh -c) or an argv list"
    )
    cwd: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    stdin: str | None = None
    timeout: float | None = Field(default=300, gt=0)
    login_shell: bool = False
    user: Literal["pomona", "root"] | None = None
    output_cap: int = Field(default=DEFAULT_OUTPUT_CAP, ge=0, description="bytes kept per stream")

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        return check_env(value)

    @field_validator("command")
    @classmethod
    def _nonempty(cls, value: str | list[str]) -> str | list[str]:
        if not value or (isinstance(value, list) and not value[0]):
            raise ValueError("command must not be empty")
        return value


class ExecResult(BaseModel):
    exit_code: int = Field(description="the command's status; -N when killed by signal N")
    stdout: str = ""
    stderr: str = ""
    duration: float = 0.0
    timed_out: bool = False
    truncated: bool = Field(
        default=False, description="stdout or stderr went past the cap and was cut"
    )

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


StreamName = Literal["stdout", "stderr"]


class ExecChunk(BaseModel):
    """One piece of streamed output; the last event of a stream is the result instead."""

    stream: StreamName
    data: str


FileType = Literal["file", "directory", "symlink", "other"]


class FileInfo(BaseModel):
    name: str
    path: str
    type: FileType
    size: int
    mode: int
    modified: float


class PatchResult(BaseModel):
    success: bool
    method: str | None = Field(default=None, description="which strategy applied it")
    stdout: str = ""
    stderr: str = ""
    error: str | None = None


class SnapshotInfo(BaseModel):
    id: str
    sandbox_id: str
    runtime: str
    spec: SandboxSpec
    created_at: float
