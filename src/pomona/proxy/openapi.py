"""The proxy's OpenAPI document: its routes, with the request schemas of `schemas.py`.

The model routes read their bodies raw (byte-faithful recording), so FastAPI cannot infer their
schemas; each route names its schema here and `build` adds the schemas to the document.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

from pomona.proxy import schemas

_MODELS: list[type[BaseModel]] = [
    schemas.ChatRequest,
    schemas.ResponsesRequest,
    schemas.AnthropicRequest,
    schemas.CountTokensRequest,
    schemas.EpisodeSpec,
    schemas.EpisodeOutcome,
    schemas.PolicyReply,
]
_REF = "#/components/schemas/{model}"


def body(name: str, required: bool = True) -> dict[str, Any]:
    """`openapi_extra` for a route whose JSON body is the schema `name`."""
    schema = {"$ref": _REF.format(model=name)}
    return {
        "requestBody": {"required": required, "content": {"application/json": {"schema": schema}}}
    }


_REFUSED = {"description": "a parameter of the wrong type or range, in the caller's error shape"}


def build(app: FastAPI) -> dict[str, Any]:
    """The document, built once per app. The proxy refuses bad parameters with a 400 in the
    caller's error shape (errors.py), not with FastAPI's 422, and the document says so."""
    if app.openapi_schema is None:
        doc = get_openapi(title=app.title, version="1", routes=app.routes)
        for operation in (op for path in doc["paths"].values() for op in path.values()):
            if operation.get("responses", {}).pop("422", None) is not None:
                operation["responses"]["400"] = _REFUSED
        components = doc.setdefault("components", {}).setdefault("schemas", {})
        for fastapi_model in ("HTTPValidationError", "ValidationError"):
            components.pop(fastapi_model, None)
        for model in _MODELS:
            schema = model.model_json_schema(ref_template=_REF)
            components.update(schema.pop("$defs", {}))
            components[model.__name__] = schema
        app.openapi_schema = doc
    return app.openapi_schema
