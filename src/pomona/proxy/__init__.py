"""The recording model proxy: OpenAI Chat, OpenAI Responses and Anthropic Messages, recorded.

from pomona.proxy import ProxyConfig, ProxyServer
with ProxyServer(ProxyConfig(trajectories="runs")) as proxy:
    ep = proxy.open_episode(model="scripted", script=["echo hello > out.txt"])
"""

from pomona.proxy.app import create_app
from pomona.proxy.cli import add_proxy_parser, cli_main, run_proxy
from pomona.proxy.config import SCRIPTED, ModelRoute, ProxyConfig
from pomona.proxy.server import AppServer, ProxyServer

__all__ = [
    "AppServer",
    "SCRIPTED",
    "ModelRoute",
    "ProxyConfig",
    "ProxyServer",
    "add_proxy_parser",
    "cli_main",
    "create_app",
    "run_proxy",
]
