"""The harness registry: every module of this package that defines `HARNESS` is a harness, so
adding one is adding one module."""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from pomona.harnesses.base import Harness


@cache
def _all() -> dict[str, Harness]:
    import pomona.harnesses as package

    found: dict[str, Harness] = {}
    for module in pkgutil.iter_modules(package.__path__):  # all of them: the rest cost ~10 ms
        harness = getattr(
            importlib.import_module(f"{package.__name__}.{module.name}"), "HARNESS", None
        )
        if isinstance(harness, Harness):
            found[harness.name] = harness
    return dict(sorted(found.items()))


def names() -> list[str]:
    return list(_all())


def get(name: str | Harness) -> Harness:
    if isinstance(name, Harness):
        return name
    try:
        return _all()[name]
    except KeyError:
        raise KeyError(f"unknown harness {name!r}; known: {', '.join(_all())}") from None


def harnesses() -> list[Harness]:
    return list(_all().values())
