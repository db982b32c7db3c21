"""The witness, host side: put it into a verifier sandbox before the agent's output arrives,
give the test run the environment that loads it, and read back what it recorded.

In the fresh sandbox, as root and before anything of the agent's is copied in:
  - the witness process (inside/witness_server.py) starts detached, listening on a Unix socket;
    its log lives in a directory only root can enter;
  - the pytest plugin (inside/pomona_witness.py) is copied into every site directory that holds
    the image's pytest, and the image's own pytest plugins (its `pytest11` entry points) are
    listed, so the run loads exactly those by name with autoloading off;
  - the `node` on the image's PATH is wrapped (inside/node_witness.sh): a `node --test` run
    gets Pomona's reporter (inside/node_witness.mjs) beside its own, in the runner's process,
    and every test file's process gets the guard (inside/node_guard.mjs) preloaded.
Then the test command runs with `environment()`; `collect()` stops the witness and returns its
records, which `integrity.judge` reads. What the runner prints is still the verdict's source
(swebench's parsers, harbor's reward file); the witness is the second, independent account.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pomona.benchmarks.task import VerifierError
from pomona.orchestrator.sdk.client import Sandbox

INSIDE = Path(__file__).with_name("inside")
SOCKET_DIR = "/run/pomona-witness"  # world-searchable: runners connect to the socket in it
CONTROL = "/run/pomona-witness-control"  # root only: the server, its log and pid
SOCKET = f"{SOCKET_DIR}/socket"
LOG = f"{CONTROL}/log.jsonl"
CONFTESTS = f"{SOCKET_DIR}/conftests.txt"  # the base's conftest.py files, whose hooks are allowed
PLUGIN = "pomona_witness"
NODE_REAL = "node.pomona-real"
# where images keep Python environments (conda's under /opt, pyenv's under /root, venvs...)
SEARCH_ROOTS = ("/usr", "/opt", "/root", "/home", "/srv", "/venv", "/app", "/testbed")
# site directories holding pytest (a package or a develop install's link); the walk stops at
# every site directory and skips trees that hold none (half the time of a full walk)
_FIND_SITES = (
    "find {roots} -maxdepth 7 \\( -name node_modules -o -name .git -o -name __pycache__ "
    "-o -name share -o -name include \\) -prune -o -type d \\( -name site-packages "
    "-o -name dist-packages \\) -prune \\( -exec test -d '{{}}/_pytest' \\; "
    "-o -exec test -e '{{}}/pytest.egg-link' \\; \\) -print 2>/dev/null | sort -u"
)
_ENTRY_POINTS = """
import sys
from importlib import metadata
names = set()
for site in sys.argv[1:]:
    for dist in metadata.distributions(path=[site]):
        names.update(e.name for e in dist.entry_points if e.group == "pytest11")
print("\\n".join(sorted(names)))
"""


@dataclass
class Installed:
    """What the witness found and put in place in one verifier sandbox."""

    sites: list[str] = field(default_factory=list)  # site directories holding the image's pytest
    plugins: list[str] = field(default_factory=list)  # the image's own pytest plugins, by name
    node: str | None = None  # the node binary that was wrapped
    untrusted: list[str] = field(default_factory=list)  # where the code under test lives

    def environment(self) -> dict[str, str]:
        """The test command's variables: the witness loaded by name, nothing autoloaded, no user
        site, git's hooks off, and where the witness finds its socket."""
        env = {
            "POMONA_WITNESS_SOCKET": SOCKET,
            "POMONA_WITNESS_UNTRUSTED": ":".join(self.untrusted),
            "POMONA_WITNESS_CONFTESTS": CONFTESTS,
            "PYTHONNOUSERSITE": "1",
            "GIT_CONFIG_COUNT": "1",
            "GIT_CONFIG_KEY_0": "core.hooksPath",
            "GIT_CONFIG_VALUE_0": "/dev/null",
        }
        if self.sites:  # else no pytest of the image could load it: the run stays unwitnessed
            options = [f"-p {PLUGIN}", *(f"-p {shlex.quote(p)}" for p in self.plugins)]
            env["PYTEST_ADDOPTS"] = " ".join(options)
            env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        return env

    def to_dict(self) -> dict[str, Any]:
        return {
            "sites": self.sites,
            "plugins": self.plugins,
            "node": self.node,
            "untrusted": self.untrusted,
        }


def _root(sandbox: Sandbox, command: str, what: str, timeout: float = 120) -> str:
    result = sandbox.exec(command, user="root", timeout=timeout)
    if result.exit_code != 0:
        raise VerifierError(
            f"the witness could not {what}: {(result.stderr or result.stdout)[-500:]}"
        )
    return result.stdout


def _put(sandbox: Sandbox, path: str, name: str, mode: str = "644") -> None:
    sandbox.write_file(path, (INSIDE / name).read_text())
    _root(sandbox, f"chown 0:0 {path} && chmod {mode} {path}", f"install {name}")


def install(
    sandbox: Sandbox, untrusted: list[str], conftests: tuple[str, ...] | list[str] = ()
) -> Installed:
    """Start the witness and put its runner parts in place; call before the agent's output is
    copied in (what it finds then is the image's, not the agent's). `untrusted` are where the
    code under test lives, `conftests` the conftest.py files there that the task itself has."""
    _root(
        sandbox,
        f"mkdir -p {SOCKET_DIR} {CONTROL} && chmod 755 {SOCKET_DIR} && chmod 700 {CONTROL}",
        "make its directories",
    )
    _put(sandbox, f"{CONTROL}/witness_server.py", "witness_server.py", "600")
    sandbox.write_file(CONFTESTS, "".join(f"{c}\n" for c in conftests))
    _root(sandbox, f"chown 0:0 {CONFTESTS} && chmod 644 {CONFTESTS}", "list the conftests")
    python = _root(sandbox, "command -v python3 || true", "find python3").strip()
    found = Installed(untrusted=untrusted)
    if python:
        _start(sandbox, python)
        found.sites = _root(
            sandbox, _FIND_SITES.format(roots=" ".join(SEARCH_ROOTS)), "look for pytest"
        ).split()
        found.sites = [s for s in found.sites if not any(s.startswith(u) for u in untrusted)]
        for site in found.sites:
            _put(sandbox, f"{site}/{PLUGIN}.py", f"{PLUGIN}.py")
        if found.sites:
            listed = sandbox.exec(
                [python, "-I", "-c", _ENTRY_POINTS, *found.sites], user="root", timeout=120
            )
            found.plugins = listed.stdout.split() if listed.exit_code == 0 else []
    found.node = _wrap_node(sandbox)
    return found


def _start(sandbox: Sandbox, python: str) -> None:
    """The witness process, detached from the exec that starts it, as root."""
    _root(
        sandbox,
        f"cd / && setsid {shlex.quote(python)} -I {CONTROL}/witness_server.py {SOCKET} {LOG} "
        f"> {CONTROL}/server.out 2>&1 < /dev/null & echo $! > {CONTROL}/pid; "
        f"for i in $(seq 100); do test -S {SOCKET} && exit 0; sleep 0.05; done; "
        f"cat {CONTROL}/server.out; exit 1",
        "start",
    )


def _wrap_node(sandbox: Sandbox) -> str | None:
    """Replace the image's `node` (the one on PATH) by the wrapper, the binary kept beside it."""
    node = sandbox.exec("command -v node || true", user="root", timeout=60).stdout.strip()
    if not node:
        return None
    directory = str(Path(node).parent)
    _put(sandbox, f"{SOCKET_DIR}/node_witness.mjs", "node_witness.mjs")
    _put(sandbox, f"{SOCKET_DIR}/node_guard.mjs", "node_guard.mjs")
    # moved, not linked: `node` may be the binary itself (official images), or a link that
    # stays valid beside its old name
    _root(sandbox, f"mv -f {shlex.quote(node)} {directory}/{NODE_REAL}", "move node aside")
    _put(sandbox, node, "node_witness.sh", "755")
    return node


def collect(sandbox: Sandbox) -> list[dict[str, Any]]:
    """Stop the witness and return its records, in the order it received them."""
    out = _root(
        sandbox,
        f"kill $(cat {CONTROL}/pid) 2>/dev/null; sleep 0.1; cat {LOG} 2>/dev/null; true",
        "stop",
    )
    records = []
    for line in out.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            record = {"event": "garbled"}
        records.append(record if isinstance(record, dict) else {"event": "garbled"})
    return records
