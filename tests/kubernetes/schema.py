"""Offline validation of Kubernetes objects: the OpenAPI schemas (kubernetes-validate, strict,
so an unknown field fails too) plus the name and label rules the schemas do not encode."""

from __future__ import annotations

import re
from typing import Any

import kubernetes_validate

VERSION = "1.33"  # the oldest release we promise (image volumes are beta from 1.33)
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
NO_SCHEMA = {"snapshot.storage.k8s.io/v1"}  # CRDs: their schema ships with the CSI snapshotter


def validate(obj: dict[str, Any]) -> None:
    """Raise AssertionError saying what is wrong with `obj`."""
    meta = obj["metadata"]
    rule = DNS_LABEL if obj["kind"] in ("Pod", "Service", "Namespace") else DNS_SUBDOMAIN
    assert rule.match(meta["name"]), f"{obj['kind']} name {meta['name']!r} is not a valid name"
    for key, value in (meta.get("labels") or {}).items():
        assert LABEL_KEY.match(key) and LABEL_VALUE.match(value), (
            f"label {key}={value!r} is invalid"
        )
    if obj["apiVersion"] in NO_SCHEMA:
        return
    try:
        kubernetes_validate.validate(obj, VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        raise AssertionError(
            f"{obj['kind']} {meta['name']}: {e.message} at {list(e.path)}"
        ) from None
