"""Snapshots of docker sandboxes: `docker commit`s into images tagged
`pomona-snapshot/<owner>:<snapshot id>`, labelled with their SnapshotInfo; they outlive the
sandbox they came from, and an image in use (by a container or another snapshot) is kept."""

from __future__ import annotations

import base64
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

from pomona.errors import SandboxConflict, SandboxFailed
from pomona.orchestrator.types import SandboxSpec, SnapshotInfo

SNAPSHOT_REPO = "pomona-snapshot"


class Commits:
    """The snapshots of one owner (a state dir) on one engine."""

    def __init__(
        self,
        runtime: str,
        owner: str,
        engine: str,
        client: Any,
        errors: Any,
        call: Callable[..., Awaitable[Any]],
        explain: Callable[[Exception], str],
    ):
        self.runtime, self.owner, self.engine = runtime, owner, engine
        self.client, self.api, self.errors = client, client.api, errors
        self._call, self._explain = call, explain

    def ref(self, snapshot_id: str) -> str:
        return f"{SNAPSHOT_REPO}/{self.owner}:{snapshot_id}"

    async def take(
        self, sandbox_id: str, container_id: str, spec: SandboxSpec, snapshot_id: str
    ) -> SnapshotInfo:
        ref = self.ref(snapshot_id)
        with contextlib.suppress(self.errors.NotFound):
            await self._call(self.client.images.get, ref)
            raise SandboxConflict(f"snapshot {snapshot_id!r} already exists")
        info = SnapshotInfo(
            id=snapshot_id,
            sandbox_id=sandbox_id,
            runtime=self.runtime,
            spec=spec,
            created_at=time.time(),
        )
        # LABEL changes rather than conf={"Labels": ...}: Podman's compat commit ignores conf.
        # The record is base64 so no quoting in it can break the instruction.
        labels = {
            "pomona.snapshot": snapshot_id,
            "pomona.snapshot.owner": self.owner,
            "pomona.snapshot.info": base64.b64encode(info.model_dump_json().encode()).decode(),
        }
        repository, tag = ref.rsplit(":", 1)
        try:
            await self._call(
                self.api.commit,
                container_id,
                repository=repository,
                tag=tag,
                changes=[f"LABEL {k}={v}" for k, v in labels.items()],
                pause=True,
            )
        except self.errors.APIError as e:
            raise SandboxFailed(f"snapshot of {sandbox_id!r} failed: {self._explain(e)}") from None
        return info

    async def list(self) -> list[SnapshotInfo]:
        images = await self._call(
            self.api.images, filters={"label": f"pomona.snapshot.owner={self.owner}"}
        )
        found = []
        for image in images:
            labels = image.get("Labels") or {}
            with contextlib.suppress(KeyError, ValueError):
                info = SnapshotInfo.model_validate_json(
                    base64.b64decode(labels["pomona.snapshot.info"])
                )
                ref = self.ref(info.id)
                # Podman names it docker.io/<ref> or localhost/<ref>
                if any(
                    tag == ref or tag.endswith("/" + ref) for tag in image.get("RepoTags") or []
                ):
                    found.append(info)
        return found

    async def delete(self, snapshot_id: str) -> bool:
        ref = self.ref(snapshot_id)
        try:
            await self._call(self.api.remove_image, ref, force=False, noprune=False)
            return True
        except self.errors.NotFound:
            return False
        except self.errors.APIError as e:
            if e.status_code == 409:
                raise SandboxConflict(
                    f"snapshot {snapshot_id!r} is in use (a sandbox or another snapshot is built on it); "
                    f"delete those first. {self.engine} said: {self._explain(e)}"
                ) from None
            raise SandboxFailed(
                f"could not delete snapshot {snapshot_id!r}: {self._explain(e)}"
            ) from None
