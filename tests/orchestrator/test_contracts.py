"""The declared contracts and what implements them: both carriers of the Service (in-process and
over HTTP) and every runtime, the memory test double included, take the same parameters as the
Protocol, and are coroutines (or async iterators) where it says so. A drift fails here before a
user meets it as a TypeError."""

from __future__ import annotations

import inspect
from collections.abc import Callable

import pytest

from pomona.orchestrator.runtime import Refreshable, Runtime
from pomona.orchestrator.runtimes.docker import DockerRuntime
from pomona.orchestrator.runtimes.kubernetes.runtime import KubernetesRuntime
from pomona.orchestrator.runtimes.local import LocalRuntime
from pomona.orchestrator.runtimes.memory import MemoryRuntime
from pomona.orchestrator.sdk.remote import RemoteService
from pomona.orchestrator.service import SandboxService, Service

RUNTIMES = [LocalRuntime, DockerRuntime, KubernetesRuntime, MemoryRuntime]
CASES = [(Service, impl) for impl in (SandboxService, RemoteService)] + [
    (Runtime, impl) for impl in RUNTIMES
]


def operations(protocol: type) -> list[str]:
    return sorted(n for n, v in vars(protocol).items() if callable(v) and not n.startswith("_"))


def shape(function: Callable) -> tuple[str, list[tuple[str, object]]]:
    kind = (
        "coroutine"
        if inspect.iscoroutinefunction(function)
        else "async iterator"
        if inspect.isasyncgenfunction(function)
        else "function"
    )
    return kind, [(p.name, p.kind) for p in inspect.signature(function).parameters.values()]


@pytest.mark.parametrize("protocol, impl", CASES, ids=lambda c: c.__name__)
def test_every_operation_has_the_declared_shape(protocol, impl):
    for name in operations(protocol):
        declared_kind, declared = shape(getattr(protocol, name))
        kind, params = shape(getattr(impl, name))
        if declared_kind == "function":  # declared `def ... -> AsyncIterator`: an async generator
            declared_kind = "async iterator"
        assert (kind, params) == (declared_kind, declared), f"{impl.__name__}.{name}"


@pytest.mark.parametrize("impl", [SandboxService, RemoteService], ids=lambda c: c.__name__)
def test_both_services_default_alike(impl):
    """An argument left out means the same in-process and over HTTP."""
    for name in operations(Service):
        declared = [
            p.default for p in inspect.signature(getattr(Service, name)).parameters.values()
        ]
        actual = [p.default for p in inspect.signature(getattr(impl, name)).parameters.values()]
        assert actual == declared, f"{impl.__name__}.{name}"


def test_the_refreshable_capability_is_declared_by_the_runtimes_that_share_state():
    """Several service replicas may share a local state dir or a cluster; docker's list is its
    own process's (README: multi-replica on docker is not done), the memory runtime's too."""
    assert [r.__name__ for r in RUNTIMES if issubclass(r, Refreshable)] == [
        "LocalRuntime",
        "KubernetesRuntime",
    ]
