"""Shared test fixtures: machine checks and a throwaway state directory per session."""

from __future__ import annotations

import shutil
import subprocess


def docker_available() -> bool:
    if not shutil.which("docker"):
        return False
    return subprocess.run(["docker", "info"], capture_output=True).returncode == 0
