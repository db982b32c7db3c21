"""Who is calling the service: an API key's name, and whether it is an admin's."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Principal:
    """Who is calling: an API key's name. Admins see every sandbox."""

    name: str
    admin: bool = False

    def owns(self, owner: str | None) -> bool:
        return self.admin or owner == self.name
