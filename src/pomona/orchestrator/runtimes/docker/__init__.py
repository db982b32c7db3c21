"""The Docker runtime: one container per sandbox over the Docker Engine API (the `docker` SDK),
which also drives Podman's Docker-compatible socket (`engine="podman"`). Its parts, mirroring the
local runtime's: engine.py (exec and terminals over the engine's exec API), files.py (the files
API over its archive API), containers.py (a container's create options from a spec),
snapshots.py (commits) and runtime.py (the Runtime: lifecycle, adoption, ports).

A sandbox is a container that idles (`sleep infinity` under the engine's init, `init=True`) and
carries its whole record in labels: `pomona.sandbox` (id), `pomona.owner` (a stable hash of the
state dir, so a new process with the same state dir finds and adopts its containers, and removes
those it cannot adopt), `pomona.spec` (the spec as JSON), plus the user's labels. Nothing else is
kept on disk. Limits map to the engine's: cpu -> NanoCpus, memory -> Memory (= MemorySwap: no
swap), pids -> PidsLimit, disk -> StorageOpt size (only where the storage driver supports it:
overlay2 on xfs with pquota, btrfs, zfs, devicemapper; overlay2 on ext4, as on this project's
machines, does not, and a disk limit is then refused with InvalidRequest instead of ignored).

Snapshots are `docker commit`s into images tagged `pomona-snapshot/<owner>:<snapshot id>`,
labelled with the source sandbox and spec; they outlive the sandbox they came from.

Host-local engine only: the timeout kill (killpg on the exec's host pid), port connect and the
gateway network mode (a listener opened inside the container's network namespace through
/proc/<pid>/ns/net, pomona.orchestrator.linux.netns) need the engine's processes to be on this host,
which is the case for a local dockerd or a rootful `podman system service`. A remote engine
(tcp:// to another machine) runs the rest but not those three.
"""

from __future__ import annotations

from pomona.orchestrator.runtimes.docker.runtime import DockerRuntime

__all__ = ["DockerRuntime"]
