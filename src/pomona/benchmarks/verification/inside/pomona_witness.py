"""Pomona's witness inside a pytest run: a plugin loaded by name (`-p pomona_witness`) before any
code under test is imported, which reports every test outcome, as pytest itself reports it, to
the witness process over a socket, with a check after every test that the runner is still the
one that started.

What it checks, after each test and at the end: that every function and class of the runner's
own modules (`pytest`, `_pytest.*`, `pluggy.*`, `unittest.*`, this plugin's) came from outside
the code under test when the run began and is still that object, with the same code; that a
few of the interpreter's (`sys.exit`,
`os._exit`, `builtins.AssertionError`, `builtins.__import__`) is the object it was when the run
began, with the same code; that every implementation of a pytest hook comes from outside the
code under test (the runner, the image's plugins, a conftest.py of the base commit); that no
import hook or trace function the code under test installed is in place. Any difference is
reported as tampering, and the verifier then never calls the run resolved.

It imports only the standard library, so it runs under any Python that pytest runs on; it sends
only what pytest knows, and never decides a verdict itself. This file is copied into the
verifier's sandbox; it is not part of Pomona's own import graph.
"""

from __future__ import annotations

import builtins
import json
import os
import socket
import sys
import threading
import types
from typing import Any

# the runner, its hook machinery, the assertion library unittest-style tests use, and ours
RUNNER_PREFIXES = ("pytest", "_pytest", "pluggy", "unittest", "pomona_witness")
INTERPRETER = (
    (sys, "exit"),
    (sys, "excepthook"),
    (os, "_exit"),
    (os, "kill"),
    (builtins, "AssertionError"),
    (builtins, "__import__"),
    (builtins, "__build_class__"),
)


def _untrusted() -> tuple[str, ...]:
    value = os.environ.get("POMONA_WITNESS_UNTRUSTED", "")
    return tuple(os.path.realpath(p) + os.sep for p in value.split(os.pathsep) if p)


UNTRUSTED = _untrusted()


def _allowed_conftests() -> frozenset[str]:
    """The conftest.py files of the base commit (the verifier lists them before the agent's
    output arrives); a hook from any other conftest.py in the code under test is tampering."""
    listing = os.environ.get("POMONA_WITNESS_CONFTESTS", "")
    try:
        with open(listing) as f:
            return frozenset(os.path.realpath(line.strip()) for line in f if line.strip())
    except OSError:
        return frozenset()


ALLOWED_CONFTESTS = _allowed_conftests()


def _code_of(obj: Any) -> types.CodeType | None:
    fn = getattr(obj, "__func__", obj)
    code = getattr(fn, "__code__", None) if isinstance(fn, types.FunctionType) else None
    return code if isinstance(code, types.CodeType) else None


def _members(obj: Any) -> dict[str, Any]:
    """What of a module or class decides behaviour: its functions, classes and methods."""
    out = {}
    for name, value in list(vars(obj).items()):
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        if isinstance(value, property):
            value = value.fget
        if isinstance(value, (types.FunctionType, type)):
            out[name] = value
    return out


def _runner_modules() -> dict[str, types.ModuleType]:
    return {
        name: mod
        for name, mod in list(sys.modules.items())
        if isinstance(mod, types.ModuleType) and name.split(".")[0] in RUNNER_PREFIXES
    }


def _fingerprint(obj: Any) -> tuple[int, int]:
    return id(obj), id(_code_of(obj))


def snapshot() -> dict[str, tuple[int, int]]:
    """Every member of the runner's modules (and the interpreter's few), by identity and code."""
    seen: dict[str, tuple[int, int]] = {}
    for name, mod in _runner_modules().items():
        for attr, value in _members(mod).items():
            seen[f"{name}:{attr}"] = _fingerprint(value)
            if isinstance(value, type) and value.__module__ == name:
                for meth, fn in _members(value).items():
                    seen[f"{name}:{attr}.{meth}"] = _fingerprint(fn)
    for owner, attr in INTERPRETER:
        seen[f"{owner.__name__}:{attr}"] = _fingerprint(getattr(owner, attr, None))
    return seen


def _resolve(key: str) -> Any:
    mod_name, _, path = key.partition(":")
    obj: Any = (
        sys.modules.get(mod_name)
        if mod_name not in ("sys", "os", "builtins")
        else {"sys": sys, "os": os, "builtins": builtins}[mod_name]
    )
    for part in path.split("."):
        if obj is None:
            return None
        raw = vars(obj).get(part) if hasattr(obj, "__dict__") else None
        if raw is None:
            raw = getattr(obj, part, None)
        if isinstance(raw, (staticmethod, classmethod)):
            raw = raw.__func__
        if isinstance(raw, property):
            raw = raw.fget
        obj = raw
    return obj


def _inside(path: str | None) -> bool:
    if not path or not os.path.isabs(path):  # "<frozen ...>", "<string>": not a file
        return False
    real = os.path.realpath(path)
    return any(real.startswith(root) for root in UNTRUSTED)


def _origin(obj: Any) -> str | None:
    code = _code_of(obj)
    if code is not None:
        return code.co_filename
    module = sys.modules.get(getattr(type(obj), "__module__", "") or "")
    return getattr(module, "__file__", None)


class Witness:
    """The plugin object: holds the socket, the snapshot, and the runner's starting state."""

    def __init__(self) -> None:
        self.sock: socket.socket | None = None
        self.lock = threading.Lock()
        self.baseline: dict[str, tuple[int, int]] = {}
        self.trace = (sys.gettrace(), sys.getprofile())
        self.meta_path = list(sys.meta_path)
        self.path_hooks = list(sys.path_hooks)
        self.config: Any = None
        self.tampered: list[str] = []

    # --- the channel ----------------------------------------------------------------------------

    def connect(self) -> None:
        path = os.environ.get("POMONA_WITNESS_SOCKET", "")
        if not path:
            return
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
        except OSError as e:
            sys.stderr.write(f"pomona witness: cannot reach {path}: {e}\n")
            return
        os.set_inheritable(sock.fileno(), False)
        self.sock = sock

    def send(self, event: dict[str, Any]) -> None:
        if self.sock is None:
            return
        data = (json.dumps(event, default=str) + "\n").encode()
        with self.lock:
            try:
                self.sock.sendall(data)
            except OSError:
                self.sock = None

    # --- the checks -----------------------------------------------------------------------------

    def check(self) -> list[str]:
        """What changed in the runner since the run began (empty: nothing)."""
        found = []
        for key, (ident, code) in self.baseline.items():
            now = _resolve(key)
            if now is None and key.split(":")[0] in ("sys", "os", "builtins"):
                found.append(f"{key} is gone")
            elif now is not None and _fingerprint(now) != (ident, code):
                found.append(f"{key} was replaced")
        if (sys.gettrace(), sys.getprofile()) != self.trace:
            found.append("a trace or profile function was installed")
        for name, now, then in (
            ("sys.meta_path", sys.meta_path, self.meta_path),
            ("sys.path_hooks", sys.path_hooks, self.path_hooks),
        ):
            for entry in now:
                if entry not in then and _inside(_origin(entry)):
                    found.append(f"an entry of {name} from the code under test: {entry!r}")
        if self.config is not None:
            found += self._hooks()
        return found

    def _hooks(self) -> list[str]:
        """Hook implementations from the code under test, other than its base commit's
        conftest.py files (the verifier refuses output that changes one)."""
        found = []
        pm = self.config.pluginmanager
        for name in dir(pm.hook):
            caller = getattr(pm.hook, name, None)
            get = getattr(caller, "get_hookimpls", None)
            if get is None:
                continue
            for impl in get():
                origin = _origin(impl.function)
                if _inside(origin) and os.path.realpath(origin or "") not in ALLOWED_CONFTESTS:
                    found.append(f"hook {name} implemented by the code under test ({origin})")
        return found

    def foreign(self) -> list[str]:
        """Members of the runner whose code comes from the code under test already when the run
        began (a module in the runner's place that patched it before pytest configured)."""
        found = []
        for key in self.baseline:
            code = _code_of(_resolve(key))
            if code is not None and _inside(code.co_filename):
                found.append(f"{key} is code from {code.co_filename}")
        return found

    def note(self, check: Any = None) -> list[str]:
        try:
            found = (check or _CHECK)(self)
        except Exception as e:  # a check that cannot run shows nothing: it is reported
            found = [f"the witness's check failed: {e!r}"]
        new = [f for f in found if f not in self.tampered]
        self.tampered += new
        return new


WITNESS = Witness()
_CHECK = Witness.check  # called through this reference: replacing the method changes nothing


def pytest_configure(config: Any) -> None:
    WITNESS.config = config
    WITNESS.connect()
    WITNESS.baseline = snapshot()
    import _pytest
    import pluggy
    import pytest

    WITNESS.send(
        {
            "event": "start",
            "runner": "pytest",
            "pid": os.getpid(),
            "argv": sys.argv,
            "cwd": os.getcwd(),
            "rootdir": str(config.rootpath),
            "inifile": str(config.inipath) if config.inipath else None,
            "version": pytest.__version__,
            "origins": {
                "pytest": pytest.__file__,
                "_pytest": _pytest.__file__,
                "pluggy": pluggy.__file__,
                "pomona_witness": __file__,
            },
            "plugins": sorted(
                str(name) for name, _ in config.pluginmanager.list_name_plugin() if name
            ),
            "tampered": WITNESS.note(Witness.foreign) + WITNESS.note(),
        }
    )


def pytest_runtest_logreport(report: Any) -> None:
    WITNESS.send(
        {
            "event": "report",
            "nodeid": report.nodeid,
            "when": report.when,
            "outcome": report.outcome,
            "xfail": hasattr(report, "wasxfail"),
        }
    )


def pytest_runtest_logfinish(nodeid: str, location: Any) -> None:
    tampered = WITNESS.note()
    if tampered:
        WITNESS.send({"event": "tampered", "nodeid": nodeid, "tampered": tampered})


def pytest_collectreport(report: Any) -> None:
    if report.failed:
        WITNESS.send({"event": "collect-error", "nodeid": report.nodeid})


def pytest_sessionfinish(session: Any, exitstatus: Any) -> None:
    WITNESS.send(
        {
            "event": "finish",
            "exitstatus": int(exitstatus),
            "failed": session.testsfailed,
            "collected": session.testscollected,
            "tampered": WITNESS.note(),
        }
    )


def pytest_unconfigure(config: Any) -> None:
    WITNESS.send({"event": "end", "tampered": WITNESS.note()})
    if WITNESS.sock is not None:
        WITNESS.sock.close()
        WITNESS.sock = None
