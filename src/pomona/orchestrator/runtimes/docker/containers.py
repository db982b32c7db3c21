"""What a sandbox's container is created with: the engine's create options from a SandboxSpec
(its record in labels, its limits, mounts, network, and Pomona's security floor: seccomp profile,
capabilities, masked paths), and the static init a container borrows from the host where the
engine has none of its own."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from pomona.errors import InvalidRequest
from pomona.orchestrator.runtimes import hardening
from pomona.orchestrator.sources import sif_path
from pomona.orchestrator.types import NetworkMode, SandboxSpec, SnapshotInfo

# Static inits (tini or catatonit) a container can borrow when the engine's own is missing
HOST_INITS = (
    "/usr/bin/catatonit",
    "/usr/libexec/podman/catatonit",
    "/usr/bin/tini-static",
    "/usr/bin/docker-init",
)
INIT_MOUNT = "/dev/.pomona-init"  # in the container's private /dev: never part of a snapshot


def labels(
    sandbox_id: str,
    spec: SandboxSpec,
    owner: str,
    creator: tuple[int, int],
    created_at: float,
    snapshot: SnapshotInfo | None,
) -> dict[str, str]:
    """The sandbox's whole record, so a later process with the same state dir adopts it."""
    return {
        **spec.labels,
        "pomona.sandbox": sandbox_id,
        "pomona.owner": owner,
        "pomona.spec": spec.model_dump_json(),
        "pomona.created": repr(created_at),
        "pomona.creator": f"{creator[0]}:{creator[1]}",
        "pomona.origin": snapshot.id if snapshot else "",
    }


@dataclass
class ContainerOptions:
    """The engine's create call for one sandbox: `create` for APIClient.create_container, `host`
    for its HostConfig (create_host_config), and the HostConfig fields docker-py has no
    argument for (the masked and read-only paths)."""

    create: dict[str, Any]
    host: dict[str, Any]
    extra_host: dict[str, Any]

    def with_host_init(self, host_init: str) -> ContainerOptions:
        """Again, with a static init from the host instead of the engine's: Podman's
        Docker-compatible API looks for catatonit only (it ignores containers.conf init_path)."""
        binds = {**self.host.get("binds", {}), os.path.realpath(host_init): _bind(INIT_MOUNT, True)}
        return ContainerOptions(
            {
                **self.create,
                "command": [INIT_MOUNT, "--", "sleep", "infinity"],
                "volumes": [b["bind"] for b in binds.values()],
            },
            {**self.host, "init": False, "binds": binds},
            self.extra_host,
        )


def _bind(target: str, read_only: bool) -> dict[str, str]:
    return {"bind": target, "mode": "ro" if read_only else "rw"}


def create_options(
    name: str,
    sandbox_id: str,
    spec: SandboxSpec,
    image: str,
    labels: dict[str, str],
    seccomp: str,
    oci_runtime: str | None = None,
    extra_mounts: dict[str, str] | None = None,
) -> ContainerOptions:
    """The create call for one sandbox, with Pomona's floor (runtimes/hardening.py); `seccomp`
    is the profile as this engine takes it (the JSON, or a path to it), `oci_runtime` the
    engine's name of the OCI runtime to run it under (runsc, for gVisor), if not its default,
    `extra_mounts` host files Pomona itself binds in read-only (host path -> sandbox path)."""
    for m in spec.mounts:  # the engine would create a missing source, as root, on the host
        if not os.path.exists(m.host_path()):
            raise InvalidRequest(f"mount source {m.source} does not exist on the host")
    binds = {m.host_path(): _bind(m.target, m.read_only) for m in spec.mounts}
    binds.update({host: _bind(inside, True) for host, inside in (extra_mounts or {}).items()})
    create: dict[str, Any] = dict(
        image=image,
        command=["sleep", "infinity"],
        name=name,
        labels=labels,
        detach=True,
        hostname=sandbox_id[:63],
        environment=dict(spec.env),
        user="0:0",
    )
    host: dict[str, Any] = dict(
        init=True,
        network_mode="bridge" if spec.network == NetworkMode.full else "none",
        security_opt=[
            "no-new-privileges",
            f"seccomp={seccomp}",
        ],
        cap_drop=["ALL"],
        cap_add=list(hardening.ROOT_CAPABILITIES),
    )
    if oci_runtime:
        host["runtime"] = oci_runtime
    if binds:
        create["volumes"] = [b["bind"] for b in binds.values()]
        host["binds"] = binds
    limits = spec.limits
    if limits.cpu:
        host["nano_cpus"] = int(limits.cpu * 1e9)
    if limits.memory:
        host["mem_limit"] = host["memswap_limit"] = limits.memory
    if limits.pids:
        host["pids_limit"] = limits.pids
    if limits.disk:
        host["storage_opt"] = {"size": str(limits.disk)}
    extra = {
        "MaskedPaths": list(hardening.MASKED_PATHS),
        "ReadonlyPaths": list(hardening.READ_ONLY_PATHS),
    }
    return ContainerOptions(create, host, extra)


def caps_disks(info: dict[str, Any]) -> bool:
    """Whether the engine's storage driver (its `info`) caps a container's writable layer:
    btrfs, zfs and devicemapper do, overlay2 only on xfs (mounted with pquota, which the engine
    does not report: a create then says so)."""
    driver = info.get("Driver")
    backing = dict(info.get("DriverStatus") or []).get("Backing Filesystem")
    return driver in ("btrfs", "zfs", "devicemapper") or (
        driver in ("overlay2", "overlay") and backing == "xfs"
    )


def check_image(engine: str, ref: str) -> None:
    """Refuse, in words, the images only the local runtime runs: the host's root filesystem and
    SIF files."""
    if ref == "host":
        raise InvalidRequest(
            f"the {engine} runtime cannot use image='host' (the host's root "
            "filesystem); give an OCI image, or use the local runtime"
        )
    if sif_path(ref) is not None:
        raise InvalidRequest(
            f"the {engine} runtime cannot run a SIF image ({ref}): the local runtime unpacks those"
        )


def no_disk_quota(engine: str, info: dict[str, Any], message: str) -> str:
    """Why a disk limit was refused, from the engine's `info`: its storage driver has no quota."""
    backing = dict(info.get("DriverStatus") or []).get("Backing Filesystem", "?")
    return (
        f"limits.disk is not supported by this {engine} engine: its storage driver "
        f"({info.get('Driver')} on {backing}) has no per-container size quota "
        f"(overlay2 needs xfs mounted with pquota). Engine said: {message}. "
        "Drop limits.disk, or use the local runtime, which has disk quotas everywhere."
    )
