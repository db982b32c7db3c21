"""Claw tasks on the docker runtime, through `pomona run` as a user would start them: a task
names no image of its own, so it runs in the image given with --image (Claw-Eval's services, its
dispatcher and graders on the payload's CPython, in an image that has no Python of its own), and
without one the run says so before any sandbox starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pomona.cli import main
from tests.conftest import docker_available

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]


def _run(runs: Path, *extra: str) -> list[str]:
    return [
        "run",
        "--benchmark",
        "claw-eval-local",
        "--harness",
        "claw-eval",
        "--runtime",
        "docker",
        "--trajectories",
        str(runs),
        "--tasks",
        "L002_mail_draft_reply",  # a service, a judged draft, a safety check
        *extra,
    ]


@pytest.fixture
def image(need: Any, claw_eval_checkout: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    if not docker_available():
        pytest.skip("the Docker engine is not running")
    monkeypatch.setenv("POMONA_CLAW_EVAL", str(claw_eval_checkout))
    from tests.images import debian_image

    return debian_image()


def test_claw_tasks_run_on_docker_in_the_given_image(image: str, tmp_path: Path, capsys):
    code = main(_run(tmp_path / "runs", "--image", image))
    out = capsys.readouterr().out
    assert code == 0, out
    assert " 1/1 " in out


def test_without_an_image_the_run_says_what_to_give(image: str, tmp_path: Path, capsys):
    code = main(_run(tmp_path / "runs"))
    err = capsys.readouterr().err
    assert code == 2
    assert "only the local runtime has" in err and "--image" in err
    assert not (tmp_path / "runs").exists()  # refused before anything started or was recorded
