"""Real, unmodified agent harnesses, run headless in sandboxes against the recording proxy.

from pomona.harnesses import install, run, tools_mount
install(["pi"])                                   # into /var/cache/pomona/tools, cached
result = run("pi", "fix the bug", sandbox, "scripted", proxy, script=["make test"])
"""

from pomona.harnesses.base import Harness, Launch, Outputs, RunContext
from pomona.harnesses.payload import DEFAULT_ROOT, InstallReport, install, installed
from pomona.harnesses.registry import get, harnesses, names
from pomona.harnesses.runner import HarnessResult, run, tools_mount

__all__ = [
    "DEFAULT_ROOT",
    "Harness",
    "HarnessResult",
    "InstallReport",
    "Launch",
    "Outputs",
    "RunContext",
    "get",
    "harnesses",
    "install",
    "installed",
    "names",
    "run",
    "tools_mount",
]
