"""Pomona: real agent harnesses in isolated sandboxes, every model call recorded."""

from pomona.orchestrator.client import AsyncSandbox, AsyncSandboxClient, Sandbox, SandboxClient
from pomona.orchestrator.errors import PomonaError
from pomona.orchestrator.types import ExecResult, SandboxInfo, SandboxSpec, SnapshotInfo

__all__ = ["AsyncSandbox", "AsyncSandboxClient", "ExecResult", "PomonaError", "Sandbox",
           "SandboxClient", "SandboxInfo", "SandboxSpec", "SnapshotInfo"]
