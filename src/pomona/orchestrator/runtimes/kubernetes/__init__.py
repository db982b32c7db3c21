"""The `kubernetes` runtime: a Pod per sandbox through the official client. Its parts:
objects.py (the Pod, NetworkPolicy and VolumeSnapshot it creates, as pure dicts), gate.py (the
in-pod gate that gives exec the local runtime's semantics), channels.py (the client's blocking
exec and port-forward streams, bridged to asyncio), cluster.py (the API server: clients, calls,
errors), pods.py (a sandbox's pod: its record, made, waited for, found, removed), commands.py
(exec, terminals and helper commands through pods/exec), files.py (the files API over those
commands), pools.py (warm pools of ready pods), snapshots.py (VolumeSnapshots or workspace
tars), runtime.py (the Runtime: their composition, and the sandboxes' lifecycle)."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    """KubernetesRuntime imports the client lazily: objects.py and `pomona deploy render` need
    no `kubernetes` package."""
    if name == "KubernetesRuntime":
        from pomona.orchestrator.runtimes.kubernetes.runtime import KubernetesRuntime

        return KubernetesRuntime
    raise AttributeError(name)
