"""Gymnasium environments over real sandboxes (and, next, real harnesses).

Importing pomona registers them: gym.make("pomona/ShellEnv-v0").
"""

from __future__ import annotations


def register_envs() -> None:
    import gymnasium

    if "pomona/ShellEnv-v0" not in gymnasium.registry:
        gymnasium.register("pomona/ShellEnv-v0", entry_point="pomona.gym.shell_env:ShellEnv")
