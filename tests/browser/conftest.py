"""Fixtures for the browser tests: real Chromium in local sandboxes on one state directory, a
recording proxy, and a stand-in judge model served over the OpenAI wire protocol."""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from pomona.proxy import ModelRoute, ProxyConfig, ProxyServer


@pytest.fixture(scope="session")
def browser_state() -> Iterator[str]:
    if shutil.which("chromium") is None:
        pytest.skip("Debian's chromium is not installed (./dev setup installs it)")
    path = tempfile.mkdtemp(prefix="pomona-browser-")
    yield path
    from pomona.orchestrator.runtimes.local import LocalRuntime
    from pomona.orchestrator.sdk.shared import close_shared

    close_shared(path)
    LocalRuntime(path).unmount_store()


@pytest.fixture(scope="session")
def client(browser_state: str) -> Any:
    from pomona.orchestrator.sdk.shared import shared_client

    return shared_client("local", browser_state)


class JudgeModel:
    """A stand-in for a vision judge (no such model runs here): an OpenAI-compatible server whose
    reply is `decide(request body)`. It records every request it got."""

    def __init__(self, decide: Callable[[dict[str, Any]], str]):
        self.decide, self.requests = decide, []
        judge = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                judge.requests.append(body)
                text = judge.decide(body)
                out = json.dumps(
                    {
                        "id": "chatcmpl-judge",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body.get("model", "judge"),
                        "choices": [
                            {
                                "index": 0,
                                "finish_reason": "stop",
                                "message": {"role": "assistant", "content": text},
                            }
                        ],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    return tmp_path / "runs"


@pytest.fixture
def proxy(runs: Path) -> Iterator[ProxyServer]:
    with ProxyServer(ProxyConfig(trajectories=runs)) as server:
        yield server


def route(proxy: ProxyServer, name: str, url: str) -> None:
    proxy.config.models.append(
        ModelRoute.from_entry(
            {
                "model_name": name,
                "litellm_params": {"model": f"openai/{name}", "api_base": url, "api_key": "x"},
            }
        )
    )
