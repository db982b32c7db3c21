"""Pomona: real agent harnesses in isolated sandboxes, every model call recorded."""

from pomona.errors import PomonaError
from pomona.gym import register_when_gymnasium_loads as _register_envs
from pomona.orchestrator.sdk.client import AsyncSandbox, AsyncSandboxClient, Sandbox, SandboxClient
from pomona.orchestrator.types import ExecResult, SandboxInfo, SandboxSpec, SnapshotInfo

_register_envs()  # now if gymnasium is loaded, else when it is: importing it here costs numpy

__all__ = [
    "AsyncSandbox",
    "AsyncSandboxClient",
    "ExecResult",
    "PomonaError",
    "Sandbox",
    "SandboxClient",
    "SandboxInfo",
    "SandboxSpec",
    "SnapshotInfo",
]
