"""Files and directories of the caller's sandbox: JSON with base64 (Orchard's), raw bytes, and
tar archives. Each takes one of the caller's file-operation slots (server/policy.py)."""

from __future__ import annotations

import base64
import binascii
import tarfile
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from pomona.errors import InvalidRequest
from pomona.orchestrator.api_models import (
    FileContent,
    FileList,
    FileRemoved,
    FileUpload,
    FileWritten,
)
from pomona.orchestrator.server.dependencies import Coord, FileSlot, OwnedSandbox
from pomona.orchestrator.server.errors import ERRORS
from pomona.orchestrator.types import FileInfo

router = APIRouter(dependencies=[FileSlot])
TAR = {"application/x-tar": {"schema": {"type": "string", "format": "binary"}}}
OCTETS = {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}
Path_ = Annotated[str, Query(min_length=1, description="absolute, or relative to the workdir")]


def _b64(content: str) -> bytes:
    try:
        return base64.b64decode(content, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest("content is not valid base64") from None


@router.post("/sandboxes/{sandbox_id}/files", response_model=FileWritten, responses=ERRORS)
async def upload_file(sandbox: OwnedSandbox, body: FileUpload, coord: Coord) -> FileWritten:
    data = _b64(body.content)
    await coord.service.write_file(sandbox.id, body.path, data, body.mode)
    return FileWritten(path=body.path, size=len(data))


@router.get("/sandboxes/{sandbox_id}/files", response_model=FileContent, responses=ERRORS)
async def download_file(sandbox: OwnedSandbox, path: Path_, coord: Coord) -> FileContent:
    data = await coord.service.read_file(sandbox.id, path)
    return FileContent(path=path, content=base64.b64encode(data).decode(), size=len(data))


@router.delete("/sandboxes/{sandbox_id}/files", response_model=FileRemoved, responses=ERRORS)
async def remove_file(
    sandbox: OwnedSandbox, path: Path_, coord: Coord, recursive: bool = False
) -> FileRemoved:
    await coord.service.remove(sandbox.id, path, recursive)
    return FileRemoved(path=path)


@router.get("/sandboxes/{sandbox_id}/files/list", response_model=FileList, responses=ERRORS)
async def list_files(sandbox: OwnedSandbox, coord: Coord, path: Path_ = "/workspace") -> FileList:
    return FileList(path=path, files=await coord.service.list_files(sandbox.id, path))


@router.get("/sandboxes/{sandbox_id}/files/stat", response_model=FileInfo, responses=ERRORS)
async def stat_file(sandbox: OwnedSandbox, path: Path_, coord: Coord) -> FileInfo:
    return await coord.service.stat(sandbox.id, path)


@router.get(
    "/sandboxes/{sandbox_id}/files/raw",
    response_class=Response,
    responses={**ERRORS, 200: {"content": OCTETS}},
)
async def read_raw(sandbox: OwnedSandbox, path: Path_, coord: Coord) -> Response:
    data = await coord.service.read_file(sandbox.id, path)
    return Response(data, media_type="application/octet-stream")


@router.put(
    "/sandboxes/{sandbox_id}/files/raw",
    response_model=FileWritten,
    responses=ERRORS,
    openapi_extra={"requestBody": {"content": OCTETS, "required": True}},
)
async def write_raw(
    sandbox: OwnedSandbox,
    path: Path_,
    request: Request,
    coord: Coord,
    mode: Annotated[int, Query(ge=0, le=0o7777)] = 0o644,
) -> FileWritten:
    data = await request.body()
    await coord.service.write_file(sandbox.id, path, data, mode)
    return FileWritten(path=path, size=len(data))


@router.get(
    "/sandboxes/{sandbox_id}/archive",
    response_class=Response,
    responses={**ERRORS, 200: {"content": TAR}},
)
async def download_dir(sandbox: OwnedSandbox, coord: Coord, path: Path_ = ".") -> Response:
    tar = await coord.service.download_dir(sandbox.id, path)
    return Response(tar, media_type="application/x-tar")


@router.put(
    "/sandboxes/{sandbox_id}/archive",
    response_model=FileWritten,
    responses=ERRORS,
    openapi_extra={"requestBody": {"content": TAR, "required": True}},
)
async def upload_dir(
    sandbox: OwnedSandbox, request: Request, coord: Coord, path: Path_ = "."
) -> FileWritten:
    tar = await request.body()
    try:
        await coord.service.upload_dir(sandbox.id, path, tar)
    except tarfile.TarError as e:
        raise InvalidRequest(f"the body is not an uncompressed tar archive ({e})") from None
    return FileWritten(path=path, size=len(tar))
