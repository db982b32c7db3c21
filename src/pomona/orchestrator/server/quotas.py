"""How much of the service one API key may hold at once: live sandboxes, the CPU and memory
their limits add up to, and the longest TTL. Admin keys have no quota.

A quota is checked where the lease is claimed, in the same atomic step of the store (a SQLite
transaction, a Redis script), so a burst of creates from one key, across replicas, never holds
more than its maximum even for a moment. What can never fit (one sandbox over the key's total,
a TTL over its maximum) is a 422; what does not fit now, beside the key's live sandboxes, a 429.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from pomona.errors import InvalidRequest, QuotaExceeded
from pomona.orchestrator.types import Limits, SandboxSpec, parse_bytes


@dataclass(frozen=True)
class Quota:
    """One key's maxima; None: no maximum of that kind."""

    sandboxes: int | None = 128
    cpu: float | None = None  # cores: the sum of its live sandboxes' limits.cpu
    memory: int | None = None  # bytes: the sum of their limits.memory
    ttl: float | None = 24 * 3600.0  # seconds: the longest timeout one of its sandboxes may have

    def check_one(self, spec: SandboxSpec) -> None:
        """Refuse, with a 422, a sandbox that could never fit this quota."""
        if self.ttl is not None and spec.timeout is not None and spec.timeout > self.ttl:
            raise InvalidRequest(
                f"timeout={spec.timeout:g} s is over this key's maximum TTL of {self.ttl:g} s "
                "(pomona serve --max-ttl); ask for less and send heartbeats, or null for the maximum"
            )
        for name, asked, most, flag in (
            ("cpu", spec.limits.cpu, self.cpu, "--max-cpu-per-key"),
            ("memory", spec.limits.memory, self.memory, "--max-memory-per-key"),
        ):
            if asked is not None and most is not None and asked > most:
                raise InvalidRequest(
                    f"limits.{name}={_n(asked)} is more than this key may hold in all its "
                    f"sandboxes together ({_n(most)}; pomona serve {flag})"
                )

    def check_usage(self, count: int, cpu: float, memory: float, spec: SandboxSpec) -> None:
        """Refuse, with a 429, a sandbox that does not fit beside the key's live ones (their
        number, CPU and memory as the store summed them, in the step that claims the lease)."""
        for name, held, asked, most, flag in (
            ("live sandboxes", count, 1, self.sandboxes, "--max-sandboxes-per-key"),
            ("cores of CPU", cpu, spec.limits.cpu or 0, self.cpu, "--max-cpu-per-key"),
            (
                "bytes of memory",
                memory,
                spec.limits.memory or 0,
                self.memory,
                "--max-memory-per-key",
            ),
        ):
            if most is not None and held + asked > most:
                raise QuotaExceeded(
                    f"this key's quota of {_n(most)} {name} is used up ({_n(held)} held, this "
                    f"sandbox asks {_n(asked)}; pomona serve {flag}): delete sandboxes first"
                )

    def cap(self, defaults: Limits) -> Limits:
        """Default limits no bigger than this key's totals: a default never makes a sandbox
        that could not fit the quota on its own."""
        return defaults.model_copy(
            update={
                name: min(value, most)
                for name, value, most in (
                    ("cpu", defaults.cpu, self.cpu),
                    ("memory", defaults.memory, self.memory),
                )
                if value is not None and most is not None
            }
        )


def _n(value: float) -> str:
    """A number as a person writes it: 3, 0.5, 1073741824."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def parse_quota(text: str, base: Quota) -> tuple[str, Quota]:
    """`NAME:sandboxes=10,cpu=8,memory=16Gi,ttl=3600` (`pomona serve --key-quota`): the named
    key's quota, the rest of it as `base`; a value of 0 or "none" is no maximum."""
    name, sep, fields = text.partition(":")
    if not sep or not name:
        raise InvalidRequest(f"--key-quota {text!r}: write NAME:sandboxes=N,cpu=C,memory=M,ttl=S")
    changes: dict[str, float | int | None] = {}
    for item in filter(None, fields.split(",")):
        key, _, value = item.partition("=")
        if key not in ("sandboxes", "cpu", "memory", "ttl"):
            raise InvalidRequest(
                f"--key-quota {text!r}: no quota {key!r} (sandboxes, cpu, memory, ttl)"
            )
        try:
            number = (
                None
                if value in ("", "0", "none")
                else (parse_bytes(value) if key == "memory" else float(value))
            )
        except ValueError:
            raise InvalidRequest(f"--key-quota {text!r}: {value!r} is not a number") from None
        changes[key] = int(number) if key == "sandboxes" and number is not None else number
    return name, dataclasses.replace(base, **changes)  # type: ignore[arg-type]
