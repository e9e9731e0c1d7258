"""The router's aiohttp application (``--http-server aiohttp``): endpoints and lifecycle."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from aiohttp import web

from pdserve.router.shell import endpoints
from pdserve.router.shell.auth import ApiKeys
from pdserve.router.shell.config import RouterConfig
from pdserve.router.shell.front_aiohttp import AiohttpExchange, to_response
from pdserve.router.shell.handler import CompletionHandler
from pdserve.router.shell.lifecycle import running, static_endpoints
from pdserve.router.shell.relay import end_streams
from pdserve.router.shell.state import RouterState

STATE_KEY = web.AppKey("state", RouterState)
__all__ = ["STATE_KEY", "build_app", "static_endpoints"]


def build_app(cfg: RouterConfig) -> web.Application:
    cfg.validate()
    if cfg.prefill or cfg.decode:
        static_endpoints(cfg)  # fail now, with the bad URL named, not at start-up
    state = RouterState(cfg)
    # Our own body limit check gives an OpenAI-style 413; aiohttp's must not fire first.
    app = web.Application(client_max_size=cfg.max_body_bytes + 1024,
                          middlewares=[ApiKeys(cfg.api_keys).middleware()] if cfg.api_keys else [])
    app[STATE_KEY] = state
    handler = CompletionHandler(state)

    async def completions(request: web.Request) -> web.StreamResponse:
        ex = AiohttpExchange(request)
        return ex.finish(await handler(ex, "completions"))

    async def chat(request: web.Request) -> web.StreamResponse:
        ex = AiohttpExchange(request)
        return ex.finish(await handler(ex, "chat"))

    async def models(request: web.Request) -> web.Response:
        return to_response(await endpoints.models(state))

    async def health(request: web.Request) -> web.Response:
        return to_response(endpoints.health(state))

    async def live(request: web.Request) -> web.Response:
        return to_response(endpoints.live(state))

    async def metrics(request: web.Request) -> web.Response:
        return to_response(endpoints.metrics(state))

    async def not_found(request: web.Request) -> web.Response:
        return to_response(endpoints.not_found(request.method, request.path))

    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_get("/live", live)
    app.router.add_get("/metrics", metrics)
    app.router.add_route("*", "/{tail:.*}", not_found)
    app.cleanup_ctx.append(_lifecycle)
    app.on_shutdown.append(_end_streams_before_the_cut)
    return app


async def _end_streams_before_the_cut(app: web.Application) -> None:
    """On SIGTERM aiohttp stops listening, then waits ``shutdown_timeout`` for the handlers
    and cuts the connections of those still running: a client would see a truncated body (over
    HTTP/1.0 indistinguishable from a short answer). A second before that, end the streams
    still relayed with an OpenAI-style error event and [DONE] instead."""
    state = app[STATE_KEY]
    asyncio.get_running_loop().call_later(max(0.0, state.cfg.shutdown_timeout_s - 1.0), end_streams, state)


async def _lifecycle(app: web.Application) -> AsyncIterator[None]:
    async with running(app[STATE_KEY]):
        yield
