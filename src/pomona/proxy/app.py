"""The recording proxy as a FastAPI app: three dialects, per-episode base URLs, every call recorded.

The app is its routers (`routes/`), mounted here with who may reach them: the probes are open,
the proxy's own routes need an API key when keys are configured, and everything under
`/e/{key}` is reached by its episode key alone. Errors are answered in one place (errors.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI

from pomona.proxy import openapi
from pomona.proxy.config import ProxyConfig
from pomona.proxy.dependencies import episode_in_url, require_api_key
from pomona.proxy.errors import add_handlers
from pomona.proxy.metrics import ProxyMetrics, add_metrics_route
from pomona.proxy.recording import CallObserver
from pomona.proxy.routes import episodes, model_calls, policy, probes
from pomona.proxy.state import ProxyState


def create_app(
    config: ProxyConfig | None = None, observers: Sequence[CallObserver] = ()
) -> FastAPI:
    """The proxy app; `ProxyState.of(app)` holds its episodes, recorder and upstream clients.
    Its metrics, and any `observers` given, are told of every call once it is recorded."""
    metrics = ProxyMetrics()
    state = ProxyState(config or ProxyConfig(), [metrics, *observers])

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await state.upstreams.aclose()
        state.recorder.close()

    app = FastAPI(
        title="pomona proxy",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url="/openapi.json",
    )
    app.state.proxy = state
    guarded = [Depends(require_api_key)]
    add_metrics_route(app, metrics, guarded)
    app.include_router(model_calls.router, dependencies=guarded)
    app.include_router(
        model_calls.episode_router, prefix="/e/{key}", dependencies=[Depends(episode_in_url)]
    )
    app.include_router(episodes.router, dependencies=guarded)
    app.include_router(policy.router, dependencies=guarded)
    app.include_router(probes.router)
    add_handlers(app)
    app.openapi = lambda: openapi.build(app)  # type: ignore[method-assign]
    return app
