"""Schemathesis against the proxy's own OpenAPI document (the three dialects' request schemas
and the episode routes): whatever it sends, the proxy never answers 5xx."""

from __future__ import annotations

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
EXAMPLES = 10


def test_the_openapi_document_has_every_dialect(proxy):
    doc = httpx.get(f"{proxy.url}/openapi.json").json()
    schemas = doc["components"]["schemas"]
    assert {"ChatRequest", "ResponsesRequest", "AnthropicRequest", "EpisodeSpec",
            "EpisodeOutcome"} <= set(schemas)  # fmt: skip
    call = doc["paths"]["/e/{key}/v1/messages"]["post"]
    body = call["requestBody"]
    assert body["content"]["application/json"]["schema"]["$ref"].endswith("/AnthropicRequest")
    assert [(p["name"], p["in"]) for p in call["parameters"]] == [("key", "path")]
    operations = [op for path in doc["paths"].values() for op in path.values()]
    assert all("422" not in op["responses"] for op in operations)  # bad parameters are a 400


def test_no_request_makes_the_proxy_fail(proxy):
    schema = schemathesis.openapi.from_url(f"{proxy.url}/openapi.json")
    checked, keys = 0, {}
    for operation in schema.get_all_operations():
        op = operation.ok()
        keys["scripted"] = proxy.open_episode(model="scripted", script=["ls", "pwd"])["key"]
        keys["policy"] = proxy.open_episode(model="policy")["key"]

        @settings(max_examples=EXAMPLES, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))  # fmt: skip
        @given(case=op.as_strategy())
        def fuzz(case) -> None:
            params = case.path_parameters or {}
            if "key" in params and hash(str(case.body)) % 2:  # reach past the 404
                params["key"] = keys["policy" if "/calls/" in case.path else "scripted"]
            if isinstance(case.body, dict) and hash(str(case.body)) % 3 == 0:
                case.body["model"] = "scripted"
            if case.path.endswith("/calls/next"):
                case.query = {**(case.query or {}), "timeout": 0}
            response = case.call(base_url=proxy.url, timeout=60)
            assert response.status_code < 500, (
                f"{case.method} {case.formatted_path}: {response.status_code} {response.text[:500]}"
            )

        fuzz()
        checked += 1
    assert checked >= 15  # every route was exercised
