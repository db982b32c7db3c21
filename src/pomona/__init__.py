"""Pomona: real agent harnesses in isolated sandboxes, every model call recorded."""

from pomona.errors import PomonaError
from pomona.orchestrator.sdk.client import AsyncSandbox, AsyncSandboxClient, Sandbox, SandboxClient
from pomona.orchestrator.types import ExecResult, SandboxInfo, SandboxSpec, SnapshotInfo

try:  # registering costs nothing more than importing gymnasium, when it is installed
    from pomona.gym import register_envs as _register_envs

    _register_envs()
except ImportError:
    pass

__all__ = ["AsyncSandbox", "AsyncSandboxClient", "ExecResult", "PomonaError", "Sandbox",
           "SandboxClient", "SandboxInfo", "SandboxSpec", "SnapshotInfo"]
