"""Snapshots of kubernetes sandboxes. With a workspace storage class and a VolumeSnapshotClass,
a CSI VolumeSnapshot of the workspace volume (a fork is a pod whose workspace claim is restored
from it); otherwise a tar of the workdir kept in a snapshot store (any pyarrow filesystem: a
shared volume, S3), its SnapshotInfo beside it. Either way only the workdir is captured, and a
snapshot that sandboxes were forked from is kept until they are gone."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

from pomona.errors import SandboxConflict, SandboxFailed, SnapshotNotFound
from pomona.orchestrator.runtimes.kubernetes import objects
from pomona.orchestrator.runtimes.kubernetes.pods import Live, Pods
from pomona.orchestrator.types import SnapshotInfo

SNAPSHOT_GROUP, SNAPSHOT_VERSION, SNAPSHOT_PLURAL = (
    "snapshot.storage.k8s.io",
    "v1",
    "volumesnapshots",
)
Workspace = Callable[[str], Awaitable[bytes]]  # a tar of a sandbox's directory (PodFS.tar_out)


class Snapshots:
    """The snapshots of one owner; `store` is the snapshot store's URI or local path, used when
    the cluster takes no volume snapshots."""

    def __init__(self, pods: Pods, store: str):
        self.pods, self.cluster, self.settings = pods, pods.cluster, pods.settings
        self.store = store

    @property
    def volumes(self) -> bool:
        """Whether snapshots are VolumeSnapshots (else tars in the store)."""
        return bool(self.settings.snapshot_class and self.settings.workspace_storage_class)

    def _volume_call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Awaitable[Any]:
        """`fn` (a CustomObjectsApi method) on this namespace's VolumeSnapshots."""
        return self.cluster.call(
            fn,
            SNAPSHOT_GROUP,
            SNAPSHOT_VERSION,
            self.cluster.namespace,
            SNAPSHOT_PLURAL,
            *args,
            **kwargs,
        )

    def _files(self) -> tuple[Any, str]:
        """The store's filesystem and this owner's directory in it."""
        from pyarrow import fs

        filesystem, base = (
            fs.FileSystem.from_uri(self.store)
            if "://" in self.store
            else (fs.LocalFileSystem(), os.path.abspath(self.store))
        )
        return filesystem, f"{base.rstrip('/')}/{self.cluster.owner}"

    async def take(self, live: Live, snapshot_id: str, workspace: Workspace) -> SnapshotInfo:
        if any(s.id == snapshot_id for s in await self.list()):
            raise SandboxConflict(f"snapshot {snapshot_id!r} already exists")
        info = SnapshotInfo(
            id=snapshot_id,
            sandbox_id=live.id,
            runtime="kubernetes",
            spec=live.spec,
            created_at=time.time(),
        )
        if self.volumes:
            body = objects.volume_snapshot(
                snapshot_id, live.pod, self.cluster.owner, self.settings, info.model_dump_json()
            )
            await self._volume_call(self.cluster.custom.create_namespaced_custom_object, body)
            await self._wait(objects.snapshot_name(snapshot_id))
            return info
        tar = await workspace(live.spec.workdir)
        filesystem, base = self._files()

        def save() -> None:
            filesystem.create_dir(base, recursive=True)
            for suffix, data in ((".tar", tar), (".json", info.model_dump_json().encode())):
                with filesystem.open_output_stream(f"{base}/{snapshot_id}{suffix}") as out:
                    out.write(data)  # the record last: a snapshot is listed only once whole

        await asyncio.to_thread(save)
        return info

    async def _wait(self, name: str) -> None:
        timeout = self.pods.ready_timeout
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = (
                await self._volume_call(self.cluster.custom.get_namespaced_custom_object, name)
            ).get("status") or {}
            if status.get("readyToUse"):
                return
            if status.get("error"):
                raise SandboxFailed(f"VolumeSnapshot {name}: {status['error'].get('message')}")
            await asyncio.sleep(0.5)
        raise SandboxFailed(f"VolumeSnapshot {name} was not ready within {timeout:g} s")

    async def source(self, snapshot: SnapshotInfo) -> tuple[str | None, bytes | None]:
        """What a fork starts from: a VolumeSnapshot's name, or the workspace tar."""
        if self.volumes:
            if not any(s.id == snapshot.id for s in await self.list()):
                raise SnapshotNotFound.of(snapshot.id)
            return objects.snapshot_name(snapshot.id), None
        filesystem, base = self._files()

        def load() -> bytes:
            with filesystem.open_input_stream(f"{base}/{snapshot.id}.tar") as f:
                return f.read()

        try:
            return None, await asyncio.to_thread(load)
        except (FileNotFoundError, OSError):
            raise SnapshotNotFound.of(snapshot.id) from None

    async def list(self) -> builtins.list[SnapshotInfo]:
        if self.volumes:
            found = await self._volume_call(
                self.cluster.custom.list_namespaced_custom_object,
                label_selector=self.cluster.selector(),
            )
            return [
                SnapshotInfo.model_validate_json(
                    item["metadata"]["annotations"][f"{objects.GROUP}/snapshot"]
                )
                for item in found.get("items", [])
            ]
        from pyarrow import fs

        filesystem, base = self._files()

        def scan() -> builtins.list[SnapshotInfo]:
            infos = filesystem.get_file_info(fs.FileSelector(base, allow_not_found=True))
            out = []
            for entry in infos:
                if entry.path.endswith(".json"):
                    with (
                        filesystem.open_input_stream(entry.path) as f,
                        contextlib.suppress(ValueError),
                    ):
                        out.append(SnapshotInfo.model_validate_json(f.read()))
            return out

        return await asyncio.to_thread(scan)

    async def delete(self, snapshot_id: str) -> bool:
        if not any(s.id == snapshot_id for s in await self.list()):
            return False
        users = await self.pods.select(**{objects.ORIGIN_LABEL: objects.id_hash(snapshot_id)})
        if users:
            raise SandboxConflict(
                f"snapshot {snapshot_id!r} is in use by {len(users)} sandbox(es) "
                "forked from it; delete those first"
            )
        if self.volumes:
            await self._volume_call(
                self.cluster.custom.delete_namespaced_custom_object,
                objects.snapshot_name(snapshot_id),
                missing_ok=True,
            )
            return True
        filesystem, base = self._files()

        def drop() -> None:
            for suffix in (".json", ".tar"):
                with contextlib.suppress(FileNotFoundError, OSError):
                    filesystem.delete_file(f"{base}/{snapshot_id}{suffix}")

        await asyncio.to_thread(drop)
        return True
