"""The `kubernetes` runtime: a Pod per sandbox through the official client. Its parts:
objects.py (the Pod, NetworkPolicy and VolumeSnapshot it creates, as pure dicts), gate.py (the
in-pod gate that gives exec the local runtime's semantics), channels.py (the client's blocking
exec and port-forward streams, bridged to asyncio), runtime.py (the Runtime itself)."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    """KubernetesRuntime imports the client lazily: objects.py and `pomona deploy render` need
    no `kubernetes` package."""
    if name == "KubernetesRuntime":
        from pomona.orchestrator.runtimes.kubernetes.runtime import KubernetesRuntime

        return KubernetesRuntime
    raise AttributeError(name)
