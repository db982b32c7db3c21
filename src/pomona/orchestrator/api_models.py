"""The REST API's own request and response models (the rest come from types.py). Shared by the
server and the remote SDK transport, so the two parse one schema: the OpenAPI document is
generated from these.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field, model_validator

from pomona.orchestrator.server.store import JobRecord, JobStatus, SandboxRecord
from pomona.orchestrator.types import (
    ExecRequest,
    FileInfo,
    PatchResult,
    Request,
    SandboxInfo,
    SandboxSpec,
)

# -- errors -------------------------------------------------------------------------------------


class ErrorBody(BaseModel):
    error: str = Field(description="the error class, e.g. SandboxNotFound")
    detail: str | list[dict[str, Any]] = Field(
        description="what went wrong and what to do about it"
    )
    request_id: str | None = None
    job_id: str | None = None


# -- sandboxes -----------------------------------------------------------------------------------


class CreateSandboxRequest(SandboxSpec):
    """A SandboxSpec plus the client-chosen id. Orchard's body is accepted too, as Orchard's API
    reads it: `block_network` maps onto `network`, top-level `cpu` ("2", "2000m") and `memory`
    onto `limits`, null for "the default", and its `timeout` (how long to wait for readiness; a
    create here answers once the sandbox is ready) does not become the TTL."""

    sandbox_id: str | None = Field(
        default=None, description="client-chosen id: a retried create is a no-op"
    )

    @model_validator(mode="before")
    @classmethod
    def _orchard_fields(cls, data: Any) -> Any:
        if not (
            isinstance(data, dict) and any(k in data for k in ("block_network", "cpu", "memory"))
        ):
            return data
        data = dict(data)
        if "block_network" in data:
            blocked = data.pop("block_network")
            data.setdefault("network", "none" if blocked in (True, None) else "full")
            data.pop("timeout", None)
        limits = dict(data.get("limits") or {})
        for key in ("cpu", "memory"):
            if key in data:
                limits[key] = data.pop(key)
        if isinstance(cpu := limits.get("cpu"), str) and cpu.endswith("m"):
            limits["cpu"] = _millicores(cpu)
        data["limits"] = limits
        return data

    def spec(self) -> SandboxSpec:
        return SandboxSpec.model_validate(self.model_dump(exclude={"sandbox_id"}))


def _millicores(value: str) -> float | str:
    """Kubernetes' "2000m" as cores; anything else is left for the schema to refuse."""
    try:
        return float(value[:-1]) / 1000
    except ValueError:
        return value


class SandboxView(SandboxInfo):
    """SandboxInfo plus the field names Orchard clients read."""

    owner: str | None = None

    @classmethod
    def of(cls, record: SandboxRecord) -> SandboxView:
        return cls(**record.info().model_dump(), owner=record.owner)

    @computed_field
    def sandbox_id(self) -> str:
        return self.id

    @computed_field
    def image(self) -> str:
        return self.spec.image

    @computed_field
    def ready(self) -> bool:
        return self.status == "ready"


class Deleted(BaseModel):
    status: Literal["deleted"] = "deleted"
    sandbox_id: str
    existed: bool


class HeartbeatAck(BaseModel):
    status: Literal["ok"] = "ok"
    sandbox_id: str
    expires_at: float | None
    sandbox: SandboxView


class Reaped(BaseModel):
    reaped: list[str] = Field(description="your sandboxes reaped now or in the last two minutes")


# -- exec and jobs -------------------------------------------------------------------------------


class ExecBody(ExecRequest):
    """An ExecRequest plus job options. Orchard's body is accepted too, as Orchard's API reads
    it: `timeout_seconds` for `timeout`, and null `timeout_seconds` or `env` for the default
    (Orchard's SDK sends every optional field, unset ones as null)."""

    model_config = ConfigDict(extra="forbid")
    wait: bool = Field(default=False, description="answer with the finished job instead of its id")
    idempotency_key: str | None = Field(
        default=None,
        max_length=200,
        description="or the Idempotency-Key header: a retry with the same "
        "key returns the same job and never runs the command twice",
    )

    @model_validator(mode="before")
    @classmethod
    def _orchard_fields(cls, data: Any) -> Any:
        if not (
            isinstance(data, dict) and ("timeout_seconds" in data or data.get("env", {}) is None)
        ):
            return data
        data = {k: v for k, v in data.items() if not (k == "env" and v is None)}
        if (seconds := data.pop("timeout_seconds", None)) is not None:
            data.setdefault("timeout", seconds)
        return data

    def exec_request(self) -> ExecRequest:
        return ExecRequest.model_validate(self.model_dump(exclude={"wait", "idempotency_key"}))


class JobView(BaseModel):
    """Orchard's job body, plus timed_out, truncated, duration and error_type."""

    job_id: str
    sandbox_id: str
    command: str | list[str]
    status: JobStatus
    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    timed_out: bool = False
    truncated: bool = False
    duration: float | None = None
    created_at: float
    started_at: float | None = None
    completed_at: float | None = None
    error: str | None = None
    error_type: str | None = None

    @classmethod
    def of(cls, job: JobRecord) -> JobView:
        r = job.result
        return cls(
            job_id=job.id,
            sandbox_id=job.sandbox_id,
            command=job.request.command,
            status=job.status,
            stdout=r.stdout if r else "",
            stderr=r.stderr if r else "",
            exit_code=r.exit_code if r else None,
            timed_out=r.timed_out if r else False,
            truncated=r.truncated if r else False,
            duration=r.duration if r else None,
            created_at=job.created_at,
            started_at=job.started_at,
            completed_at=job.completed_at,
            error=job.error or cls._timeout(job),
            error_type=job.error_type,
        )

    @staticmethod
    def _timeout(job: JobRecord) -> str | None:
        """What Orchard's clients read in `error` for a command that ran out of time."""
        if job.result is None or not job.result.timed_out:
            return None
        return (
            f"the command timed out after {job.request.timeout:g} s; its process group was killed"
        )


# -- files, patches, snapshots -------------------------------------------------------------------


class FileUpload(Request):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(min_length=1)
    content: str = Field(description="base64")
    mode: int = Field(default=0o644, ge=0, le=0o7777)


class FileWritten(BaseModel):
    success: bool = True
    path: str
    size: int


class FileContent(BaseModel):
    path: str
    content: str = Field(description="base64")
    size: int


class FileList(BaseModel):
    path: str
    files: list[FileInfo]


class FileRemoved(BaseModel):
    success: bool = True
    path: str


class PatchBody(Request):
    model_config = ConfigDict(extra="forbid")
    patch: str
    cwd: str | None = None
    timeout_seconds: float = Field(default=60, gt=0, le=3600)


class PatchView(PatchResult):
    @computed_field
    def exit_code(self) -> int:
        return 0 if self.success else 1


class SnapshotBody(Request):
    model_config = ConfigDict(extra="forbid")
    snapshot_id: str | None = Field(
        default=None, description="client-chosen: a retried snapshot is a no-op"
    )


class ForkBody(Request):
    model_config = ConfigDict(extra="forbid")
    k: int = Field(ge=1, le=256)
    labels: dict[str, str] = Field(default_factory=dict)
    sandbox_ids: list[str] | None = Field(
        default=None, description="client-chosen ids, one per branch"
    )


class SnapshotDeleted(BaseModel):
    snapshot_id: str
    deleted: bool


# -- service ------------------------------------------------------------------------------------


class ServiceInfo(BaseModel):
    service: str = "pomona"
    version: str
    status: Literal["running"] = "running"
    replica: str | None = None  # which process answered: one of `pomona serve --workers N`'s


class Health(BaseModel):
    status: Literal["healthy"] = "healthy"


class Capacity(BaseModel):
    cpu: float
    memory_bytes: int


class Node(BaseModel):
    name: str
    capacity: Capacity
    allocatable: Capacity


class SandboxUsage(BaseModel):
    name: str
    namespace: str = "pomona"
    phase: str
    cpu_request: float | None
    memory_request_bytes: int | None


class Resources(BaseModel):
    """Orchard's /resources shape; `sandbox_pods` lists the caller's sandboxes."""

    status: Literal["ok"] = "ok"
    nodes: list[Node]
    total_capacity: Capacity
    total_allocatable: Capacity
    total_requested: Capacity
    available: Capacity
    sandbox_pods: list[SandboxUsage]
