"""The harness registry: every module of this package that defines `HARNESS` is a harness, so
adding one is adding one module."""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from pathlib import Path

from pomona.errors import UsageError
from pomona.harnesses.base import Harness


class UnknownHarness(UsageError, KeyError):
    """No harness of that name (the message lists those there are)."""


_added: dict[str, Harness] = {}


def register(harness: Harness) -> Harness:
    """Add a harness defined outside this package (a plugin, a test): `get` and every
    benchmark's `--harness` then know it. Its name may not be taken."""
    if harness.name in _all() or harness.name in _added:
        raise UsageError(f"a harness named {harness.name!r} exists already")
    _added[harness.name] = harness
    return harness


@cache
def _all() -> dict[str, Harness]:
    package = __name__.rpartition(".")[0]
    found: dict[str, Harness] = {}
    for module in pkgutil.iter_modules([str(Path(__file__).parent)]):  # all: the rest cost ~10 ms
        harness = getattr(importlib.import_module(f"{package}.{module.name}"), "HARNESS", None)
        if isinstance(harness, Harness):
            found[harness.name] = harness
    return dict(sorted(found.items()))


def _known() -> dict[str, Harness]:
    return {**_all(), **_added}


def names() -> list[str]:
    return list(_known())


def get(name: str | Harness) -> Harness:
    if isinstance(name, Harness):
        return name
    try:
        return _known()[name]
    except KeyError:
        raise UnknownHarness(f"unknown harness {name!r}; known: {', '.join(_known())}") from None


def harnesses() -> list[Harness]:
    return list(_known().values())
