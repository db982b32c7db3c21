"""Gymnasium environments over real sandboxes and real, unmodified harnesses.

Importing pomona registers them, when gymnasium is imported (each documents its spaces in its
module):
  pomona/ShellEnv-v0      one step is one shell command              (pomona.gym.shell_env)
  pomona/HarnessEnv-v0    one episode is one whole harness run       (pomona.gym.harness_env)
  pomona/ModelCallEnv-v0  one step is one model call of the harness  (pomona.gym.model_call_env)
  pomona/BrowserEnv-v0    one step is one action in a real browser   (pomona.gym.browser_env)

`pomona.gym.rollout(tasks, harness, model, n=k, concurrency=c)` runs batched attempts (the
episode engine's, pomona.episodes.rollouts; `group_rollout` and `balanced_rollout` are the
trainer's, pomona.trainer.rollouts). Everything but registration loads lazily, so `import pomona`
stays light.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from importlib.machinery import ModuleSpec
from types import FrameType, ModuleType
from typing import Any, TypeAlias, TypeVar

from pomona.errors import PomonaError

ObsT = TypeVar("ObsT")
Transition: TypeAlias = tuple[ObsT, float, bool, bool, dict[str, Any]]
"""What `step` returns: observation, reward, terminated, truncated, info."""


class ResetNeeded(PomonaError, RuntimeError):
    """`step` was called before `reset` (or after the env was closed)."""


class SharedMemoryText(PomonaError, RuntimeError):
    """The env runs in a Gymnasium AsyncVectorEnv with shared memory, which cannot carry Text
    observations (see `refuse_shared_memory`)."""


def refuse_shared_memory() -> None:
    """Raise SharedMemoryText inside an AsyncVectorEnv worker that uses shared memory.

    Gymnasium's AsyncVectorEnv (1.x) reads its shared observation buffers once, when it starts,
    relying on their being views that later writes show through. A Text space's buffer reads as
    a tuple of strings instead, a copy of the empty buffer, so every text observation comes back
    as the charset's first character repeated ('000...' for ours) whatever the env returned
    (Gymnasium issue #1164). Pomona's observations are text, so that combination is refused
    where it would mislead, in words, rather than returning corrupt observations.
    """
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "_async_worker" and "gymnasium/vector" in code.co_filename:
            if frame.f_locals.get("shared_memory") is not None:
                raise SharedMemoryText(
                    "Gymnasium's AsyncVectorEnv with shared memory returns stale Text "
                    "observations (all '0'): create it with shared_memory=False, e.g. "
                    "gymnasium.make_vec(id, n, vectorization_mode='async', "
                    "vector_kwargs={'shared_memory': False})"
                )
            return
        frame = frame.f_back


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


def register_when_gymnasium_loads() -> None:
    """Register the envs now if gymnasium is loaded, else the moment it is imported: `import
    pomona` then registers them without importing gymnasium (and numpy) itself, which commands
    that never make an env (`pomona --help`, `pomona serve`) would pay for at every start."""
    if "gymnasium" in sys.modules:
        register_envs()
    elif not any(isinstance(finder, _RegisterOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _RegisterOnImport())


class _RegisterOnImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: it lets the other finders find gymnasium and has its loader call
    `register_envs` once the module has run. It steps aside after that one import."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> ModuleSpec | None:
        if fullname != "gymnasium":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _RegisterAfterRun(spec.loader)
        return spec


class _RegisterAfterRun(importlib.abc.Loader):
    """gymnasium's own loader, then `register_envs`; the module keeps its own loader."""

    def __init__(self, loader: importlib.abc.Loader):
        self.loader = loader

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        register_envs()


def __getattr__(name: str) -> Any:
    if name in ("rollout", "summary"):
        from pomona.episodes import rollouts

        return getattr(rollouts, name)
    if name in ("group_rollout", "balanced_rollout"):
        from pomona.trainer import rollouts as grouped

        return getattr(grouped, name)
    raise AttributeError(f"module 'pomona.gym' has no attribute {name!r}")
