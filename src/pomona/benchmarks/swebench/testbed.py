"""/testbed in a sandbox: brought to the base commit (a bundle cloned, the host's test tools
provided), the agent's work taken back out as one diff, and the oracle's apply script.

A task with `repo.bundle` runs on the host image: the bundle is cloned at /testbed, its declared
`test_dependencies` (default: pytest) are copied in from Pomona's own environment, `python`
means python3, and the payload's Node is linked in when its `toolchains` name `node`.
"""

from __future__ import annotations

import base64
import shlex
from typing import Any

from pomona.benchmarks import pytools
from pomona.benchmarks.swebench.instances import (
    CHECKOUT,
    TEST_DEPENDENCIES,
    TESTBED,
    SweInstance,
    bundle_of,
    toolchains,
    user_of,
)
from pomona.benchmarks.task import TaskSetupFailed, VerifierError
from pomona.orchestrator.sdk.client import Sandbox

# the agent's repository configuration runs nothing and rewrites nothing of what is taken
_GIT = "git -c core.fsmonitor= -c core.hooksPath=/dev/null"
JUNK = ("**/__pycache__/**", "**/*.pyc", ".pytest_cache/**", "**/*.orig", "**/*.rej")
NODE_LINK = "/usr/local/bin/node"


def sandbox_options(instance: SweInstance) -> dict[str, Any]:
    """create_sandbox keywords for an instance: image, user, workdir, and the payload when a
    host-image task tests with its Node."""
    options: dict[str, Any] = {"workdir": TESTBED, "user": user_of(instance)}
    if "node" in toolchains(instance) and bundle_of(instance):
        from pomona.harnesses.payload import ensure_node
        from pomona.harnesses.runner import tools_mount

        ensure_node()
        options["mounts"] = [tools_mount()]
    return options


def _host_tools(sandbox: Sandbox, instance: SweInstance) -> None:
    """On the host image: the declared Python test dependencies, `python` as python3 (eval
    scripts written for conda images call it), and the payload's node where asked for."""
    from pomona.harnesses.base import TOOLS_MOUNT

    deps = instance.get(TEST_DEPENDENCIES)  # none declared: pytest; declared empty: nothing
    pytools.install(sandbox, pytools.DEFAULT if deps is None else deps)
    links = ['command -v python >/dev/null || ln -s "$(command -v python3)" /usr/local/bin/python']
    if "node" in toolchains(instance):  # the payload's pinned Node, whatever the host has
        links.append(f"ln -sf {TOOLS_MOUNT}/node/bin/node {NODE_LINK}")
    result = sandbox.exec(" && ".join(["mkdir -p /usr/local/bin", *links]), user="root", timeout=60)
    if result.exit_code != 0:
        raise TaskSetupFailed(f"could not provide the task's tools: {result.stderr.strip()}")


def prepare_testbed(sandbox: Sandbox, instance: SweInstance) -> None:
    """Bring /testbed to the base commit. With a bundle, clone it there (remote removed, so no
    later history is reachable) and provide the test tools; an official image already has both
    (and some datasets name a ref to check out first)."""
    bundle = bundle_of(instance)
    if bundle is None:
        ref = instance.get(CHECKOUT)
        if ref:
            result = sandbox.exec(
                f"git checkout -q --detach {shlex.quote(ref)}", cwd=TESTBED, timeout=120
            )
            if result.exit_code != 0:
                raise TaskSetupFailed(f"could not check out {ref}: {result.stderr.strip()}")
        return
    sandbox.write_file("/tmp/base.bundle", bundle.read_bytes())
    base = shlex.quote(instance["base_commit"])
    result = sandbox.exec(
        f"git clone -q /tmp/base.bundle {TESTBED} && cd {TESTBED} && git checkout -q {base} && "
        "git remote remove origin && git config user.email agent@pomona.invalid && "
        "git config user.name agent && rm -f /tmp/base.bundle",
        timeout=120,
    )
    if result.exit_code != 0:
        raise TaskSetupFailed(
            f"could not check out {instance['instance_id']}: {result.stderr.strip()}"
        )
    _host_tools(sandbox, instance)


def extract_patch(sandbox: Sandbox, base_commit: str) -> str:
    """The agent's work as one diff against the base commit: tracked edits, new files, deletions
    and commits the agent made, minus build junk; taken with the agent's git configuration
    disarmed (no fsmonitor, hooks, external diff, textconv or replaced objects)."""
    excludes = " ".join(shlex.quote(f":(exclude,glob){g}") for g in JUNK)
    result = sandbox.exec(
        f"cd {TESTBED} && export GIT_NO_REPLACE_OBJECTS=1 && {_GIT} add -A && "
        f"{_GIT} -c core.fileMode=false diff --cached --no-color --no-ext-diff --no-textconv "
        f"{shlex.quote(base_commit)} -- . {excludes}",
        timeout=120,
    )
    if result.exit_code != 0:
        raise VerifierError(f"could not take the diff: {result.stderr.strip()}")
    return result.stdout


def apply_commands(patch: str) -> list[str]:
    """Shell commands that apply `patch` at /testbed: the oracle's script."""
    data = base64.b64encode(patch.encode()).decode()
    return [
        f"cd {TESTBED} && echo {data} | base64 -d > /tmp/gold.patch && git apply -v /tmp/gold.patch"
    ]
