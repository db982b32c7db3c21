"""Schemathesis against the service's own OpenAPI document, valid and invalid requests: whatever
it sends, no 500. The service runs over the memory runtime (what is fuzzed here is the service:
its schema, validation and error mapping); tests/security/test_inputs.py sends hostile strings
schemathesis does not make (lone surrogates, `..`, device paths, very long) through the service
into the local runtime.
"""

from __future__ import annotations

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from tests.service.harness import KEYS

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
EXAMPLES = 40
schemathesis.serializer.alias("application/x-tar", "application/octet-stream")


@pytest.fixture(scope="module")
def schema(memory):
    """Valid and invalid requests alike (negative mode breaks the schema on purpose), NUL bytes
    included: whatever a client sends, the answer is never a 500."""
    loaded = schemathesis.openapi.from_url(memory.url + "/openapi.json")
    loaded.config.generation.update(allow_x00=True)
    return loaded


def ensure_target(url: str) -> None:
    """A sandbox that half of the generated ids are replaced with, so cases get past the 404."""
    with httpx.Client(base_url=url, headers={"X-API-Key": KEYS["alice"]}) as client:
        assert (
            client.post(
                "/sandboxes", json={"image": "host", "sandbox_id": "fuzz-target"}
            ).status_code
            == 200
        )


def test_no_request_makes_the_service_fail(schema, memory):
    service_url = memory.url
    checked = 0
    for operation in schema.get_all_operations():
        op = operation.ok()
        ensure_target(service_url)
        strategy = st.one_of(
            op.as_strategy(GenerationMode.POSITIVE), op.as_strategy(GenerationMode.NEGATIVE)
        )

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=strategy)
        def fuzz(case) -> None:
            if "sandbox_id" in (case.path_parameters or {}) and hash(str(case.path_parameters)) % 2:
                case.path_parameters["sandbox_id"] = "fuzz-target"  # reach past the 404
            response = case.call(
                base_url=service_url, headers={"X-API-Key": KEYS["alice"]}, timeout=30
            )
            assert response.status_code < 500 or response.status_code == 503, (
                f"{case.method} {case.formatted_path}: {response.status_code} {response.text[:500]}"
            )

        fuzz()
        checked += 1
    assert checked >= 25  # every route was exercised
