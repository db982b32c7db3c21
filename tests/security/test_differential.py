"""The differential test: Docker's defaults are the floor. One probe program (probe/probe.c, over
a hundred checks: syscalls, /proc, /sys, /dev, capabilities, mounts, namespaces, cgroups,
keyrings, ptrace, sysctls, network) runs as root and as the default user in `docker run` with the
engine's defaults and in each Pomona runtime; on every check Docker refuses, Pomona refuses too.

A runtime's known gaps are listed below by name, with the issue that closes them; no other check
is exempt, so a regression anywhere else fails here. docs/security.md holds the table of one run
(`python -m tests.security.differential` writes it).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pomona.errors import RuntimeUnavailable
from tests.conftest import docker_available
from tests.podman import PodmanUnavailable
from tests.security import differential
from tests.security.differential import USERS, Results

pytestmark = pytest.mark.skipif(
    not docker_available(), reason="the baseline is Docker's defaults (./dev services)"
)

# gVisor (runsc 2022-12, Debian's): its own kernel shows its own /dev/fuse (the Sentry's FUSE;
# a mount, which the filter refuses, is needed to use it; runsc does not mask /dev paths), lets
# a process lower its own nice value and uid 1000 read the init's environment (the Sentry's
# permission checks).
_GVISOR = {"dev.fuse", "dev.unusual_nodes", "syscall.setpriority_raise"}
KNOWN_GAPS: dict[str, dict[str, set[str]]] = {
    "gvisor": {"root": _GVISOR, "user": {*_GVISOR, "proc.init_environ"}},
}


@pytest.fixture(scope="module")
def baseline() -> dict[str, Results]:
    from tests.images import debian_image

    return {user: differential.docker_default(debian_image(), user) for user in USERS}


@pytest.fixture(scope="module", params=differential.COLUMNS)
def column(request: pytest.FixtureRequest) -> Iterator[tuple[str, dict[str, Results]]]:
    try:
        with differential.pomona_runtime(request.param) as (client, image):
            yield request.param, differential.in_sandbox(client, image)
    except (RuntimeUnavailable, PodmanUnavailable) as e:
        pytest.skip(f"{request.param} cannot run here: {e}")


def test_the_probe_asks_every_area_and_every_check_runs(baseline):
    for user, results in baseline.items():
        areas = {name.split(".")[0] for name in results}
        assert {
            "syscall",
            "proc",
            "sys",
            "dev",
            "cap",
            "ns",
            "cgroup",
            "keyring",
            "ptrace",
        } <= areas
        assert {"sysctl", "net", "mount", "user", "limits"} <= areas
        assert len(results) >= 60
        assert differential.errors(results) == {}, user
    # the engine's defaults refuse what the floor is made of: the test has something to compare
    assert baseline["root"]["syscall.mount.tmpfs"][0] == "no"
    assert baseline["root"]["sysctl.kernel.core_pattern"][0] == "no"
    assert baseline["root"]["cap.eff.SYS_ADMIN"][0] == "no"
    assert baseline["root"]["cap.eff.CHOWN"][0] == "yes"


@pytest.mark.parametrize("user", USERS)
def test_pomona_is_at_least_as_strict_as_dockers_defaults(baseline, column, user):
    name, results = column
    assert differential.errors(results[user]) == {}
    looser = differential.less_strict(baseline[user], results[user])
    gaps = KNOWN_GAPS.get(name, {}).get(user, set())
    unexpected = {k: v for k, v in looser.items() if k not in gaps}
    assert not unexpected, f"Pomona {name} as {user} lets through what `docker run` refuses: " + (
        ", ".join(f"{k}: {v}" for k, v in sorted(unexpected.items()))
    )


@pytest.mark.parametrize("user", USERS)
def test_root_inside_cannot_reach_io_uring_keyrings_or_new_namespaces(column, user):
    """What the engines' own defaults let through on some runtime (Docker's: io_uring; Podman's:
    user namespaces, keyrings): Pomona's profile refuses it on every one, as `local` does."""
    name, results = column
    if name == "kubernetes":
        pytest.skip("pods run under the cluster's RuntimeDefault profile (docs/kubernetes.md)")
    for check in (
        "syscall.io_uring_setup",
        "syscall.unshare.user",
        "syscall.clone.newuser",
        "keyring.get_session",
    ):
        assert results[user][check][0] == "no", f"{name} as {user}: {check} {results[user][check]}"


@pytest.mark.parametrize("user", USERS)
def test_container_engines_get_pomonas_floor_not_their_own(column, user):
    """On docker and podman Pomona sets the floor itself (runtimes/hardening.py): stricter than
    the engines' defaults where those let a sandbox reach the network's raw side, make device
    nodes or open the hypervisor's sockets."""
    name, results = column
    if name not in ("docker", "podman", "gvisor"):
        pytest.skip("Pomona's container floor applies to the docker and podman engines")
    for check in (
        "net.raw_socket",
        "net.packet_socket",
        "syscall.mknod_char",
        "syscall.socket_vsock",
    ):
        assert results[user][check][0] == "no", f"{name} as {user}: {check} {results[user][check]}"


def test_the_comparison_catches_a_looser_runtime(baseline):
    """The comparison itself: a sandbox that may write core_pattern is caught."""
    looser = dict(baseline["root"])
    looser["sysctl.kernel.core_pattern"] = ("yes", "ok")
    assert differential.less_strict(baseline["root"], looser) == {
        "sysctl.kernel.core_pattern": "yes (ok)"
    }
