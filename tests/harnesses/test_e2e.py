"""Every installable harness, end to end: asked to create a file, the scripted model answers with
a call of the harness's own shell tool (`echo hello > out.txt`) and then a final message. The file
must hold hello, and the proxy must have recorded the calls in the harness's dialect under the
episode's key. On `local` (host image) for all; on `docker`, and in an image with no Node and no
Python, for a Node harness and a Python harness."""

from __future__ import annotations

from typing import Any

import pytest

from pomona import trajectories
from pomona.harnesses import get
from pomona.harnesses.check import file_task
from tests.harnesses.conftest import STANDALONE

pytestmark = pytest.mark.timeout(900)  # a cold machine builds the payload first (~3 min)


def _assert_file_task(sb: Any, proxy: Any, runs: Any, name: str) -> None:
    row = file_task(name, sb, proxy)
    assert row.passed, f"{name}: {row.note}\n{row.result.stdout[-2000:] if row.result else ''}"
    assert sb.exec("cat out.txt").stdout == "hello\n"
    result = row.result
    assert result is not None and result.completed and result.final_answer
    assert result.transcript, "the harness's own transcript was collected"
    calls = trajectories.read(runs, "calls").to_pylist()
    mine = [c for c in calls if c["episode"] == result.episode and not c["side"]]
    assert len(mine) >= 2
    assert {c["dialect"] for c in mine} == {get(name).dialects[0]}
    assert all(c["path"].startswith(f"/e/{result.episode}/") and c["status"] == "ok" for c in mine)
    episodes = [
        e for e in trajectories.read(runs, "episodes").to_pylist() if e["episode"] == result.episode
    ]
    assert episodes and episodes[0]["failure_kind"] == "none"
    assert episodes[0]["harness"] == name and episodes[0]["harness_version"] == get(name).version


@pytest.mark.parametrize("name", STANDALONE)
def test_file_task_local(
    name: str, need: Any, local_client: Any, sandbox_for: Any, proxy: Any, runs: Any
) -> None:
    need(name)
    _assert_file_task(sandbox_for(local_client), proxy, runs, name)


@pytest.mark.docker
@pytest.mark.parametrize("name", ["pi", "hermes"])
def test_file_task_docker(
    name: str, need: Any, docker_client: Any, sandbox_for: Any, proxy: Any, runs: Any
) -> None:
    from tests.images import debian_image

    need(name)
    _assert_file_task(sandbox_for(docker_client, debian_image()), proxy, runs, name)


@pytest.mark.docker
@pytest.mark.parametrize("name", ["pi", "mini-swe-agent"])
def test_file_task_in_image_without_node_or_python(
    name: str, need: Any, local_client: Any, sandbox_for: Any, proxy: Any, runs: Any
) -> None:
    from tests.conftest import docker_available
    from tests.harnesses.images import bare_image

    if not docker_available():
        pytest.skip("the bare image is imported through the Docker engine, which is not running")
    need(name)
    sb = sandbox_for(local_client, bare_image())
    probe = sb.exec(
        "command -v node nodejs python3 python; ls /usr/bin | grep -c -E '^(node|python)'"
    )
    assert probe.stdout.split()[-1] == "0", f"the image has Node or Python: {probe.stdout}"
    _assert_file_task(sb, proxy, runs, name)


def test_file_task_through_a_proxy_reached_over_http(
    need: Any, local_client: Any, sandbox_for: Any, proxy: Any, runs: Any
) -> None:
    """A `pomona proxy` service given by URL: episodes are opened and closed over HTTP."""
    from pomona.harnesses import run
    from pomona.harnesses.check import PROMPT, SCRIPT

    need("pi")
    sb = sandbox_for(local_client)
    result = run("pi", PROMPT, sb, "scripted", proxy.url, script=SCRIPT, timeout=120)
    assert result.failure_kind == "none" and result.calls == 2 and result.main_calls is None
    assert sb.exec("cat out.txt").stdout == "hello\n"
    episodes = [
        e for e in trajectories.read(runs, "episodes").to_pylist() if e["episode"] == result.episode
    ]
    assert episodes and episodes[0]["failure_kind"] == "none"
