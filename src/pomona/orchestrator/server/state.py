"""What one service app owns: its coordinator, keys, tenant policy and admission limits
(`app.state.service`, see `of`)."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.applications import Starlette

from pomona.orchestrator.server.admission import Admission
from pomona.orchestrator.server.coordinator import Coordinator
from pomona.orchestrator.server.keys import KeyRing
from pomona.orchestrator.server.policy import TenantPolicy


@dataclass
class ServiceState:
    coordinator: Coordinator
    keys: KeyRing
    policy: TenantPolicy
    creates: Admission
    execs: Admission

    @staticmethod
    def of(app: Starlette) -> ServiceState:
        service: ServiceState = app.state.service
        return service
