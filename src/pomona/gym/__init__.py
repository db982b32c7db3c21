"""Gymnasium environments over real sandboxes and real, unmodified harnesses.

Importing pomona registers them (each documents its spaces in its module):
  pomona/ShellEnv-v0      one step is one shell command              (pomona.gym.shell_env)
  pomona/HarnessEnv-v0    one episode is one whole harness run       (pomona.gym.harness_env)
  pomona/ModelCallEnv-v0  one step is one model call of the harness  (pomona.gym.model_call_env)
  pomona/BrowserEnv-v0    one step is one action in a real browser   (pomona.gym.browser_env)

`pomona.gym.rollout(tasks, harness, model, n=k, concurrency=c)` runs batched attempts
(pomona.gym.rollouts). Everything but registration loads lazily, so `import pomona` stays light.
"""

from __future__ import annotations

from typing import Any

_ENVS = {
    "pomona/ShellEnv-v0": ("pomona.gym.shell_env:ShellEnv", False),
    # real harnesses stamp times and session ids into their requests: not seed-deterministic
    "pomona/HarnessEnv-v0": ("pomona.gym.harness_env:HarnessEnv", True),
    "pomona/ModelCallEnv-v0": ("pomona.gym.model_call_env:ModelCallEnv", True),
    "pomona/BrowserEnv-v0": ("pomona.gym.browser_env:BrowserEnv", False),
}


def register_envs() -> None:
    import gymnasium

    for env_id, (entry_point, nondeterministic) in _ENVS.items():
        if env_id not in gymnasium.registry:
            gymnasium.register(env_id, entry_point=entry_point, nondeterministic=nondeterministic)


def __getattr__(name: str) -> Any:
    if name in ("rollout", "summary", "group_rollout", "balanced_rollout"):
        from pomona.gym import rollouts

        return getattr(rollouts, name)
    raise AttributeError(f"module 'pomona.gym' has no attribute {name!r}")
