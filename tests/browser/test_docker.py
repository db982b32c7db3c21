"""BrowserEnv on the `docker` runtime, in the browser image built offline from Debian's packages
(`pomona browser image`): the MiniWoB oracle scores 1 and no container is left behind."""

from __future__ import annotations

import subprocess

import gymnasium as gym
import pytest

import pomona  # noqa: F401 - registers the envs
from pomona.benchmarks.browser import suite
from pomona.browser_env import image
from tests.conftest import docker_available

pytestmark = pytest.mark.docker


def test_browser_env_runs_in_the_browser_image_on_docker() -> None:
    if not docker_available():
        pytest.skip("no Docker engine")
    # the image is the browser image by default on docker: built once per machine (debootstrap,
    # a few minutes), then cached
    env = gym.make("pomona/BrowserEnv-v0", benchmark="miniwob", runtime="docker")
    try:
        _, info = env.reset(seed=4, options={"task": "miniwob/enter-text"})
        sandbox = env.unwrapped.session.sandbox
        assert sandbox.info.spec.image == image.IMAGE
        container = sandbox.id
        for action in suite.oracle_actions(env.unwrapped.task, info["instruction"], info["marks"]):
            obs, reward, terminated, _, step = env.step(action)
        assert terminated and step["failure"] == "none" and reward == 1.0, step
        assert obs["screenshot"].std() > 0
    finally:
        env.close()
    left = subprocess.run(
        ["docker", "ps", "-a", "--format", "{{.Names}} {{.Labels}}"], capture_output=True, text=True
    ).stdout
    assert container not in left
