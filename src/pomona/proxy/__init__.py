"""The recording model proxy: OpenAI Chat, OpenAI Responses and Anthropic Messages, recorded.

    from pomona.proxy import ProxyConfig, ProxyServer
    with ProxyServer(ProxyConfig(trajectories="runs")) as proxy:
        ep = proxy.open_episode(model="scripted", script=["echo hello > out.txt"])

Names load lazily, so `pomona.proxy.cli` (imported by `pomona`'s CLI) does not pull in FastAPI.
"""

from importlib import import_module
from typing import Any

_EXPORTS = {
    "create_app": "pomona.proxy.app",
    "add_proxy_parser": "pomona.proxy.cli",
    "cli_main": "pomona.proxy.cli",
    "run_proxy": "pomona.proxy.cli",
    "SCRIPTED": "pomona.proxy.config",
    "ModelRoute": "pomona.proxy.config",
    "ProxyConfig": "pomona.proxy.config",
    "AppServer": "pomona.proxy.appserver",
    "ProxyServer": "pomona.proxy.server",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'pomona.proxy' has no attribute {name!r}")
    value = getattr(import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value
