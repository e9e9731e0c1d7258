"""API keys on the router, with vLLM's ``--api-key`` semantics.

As vLLM's ``AuthenticationMiddleware`` (``vllm/entrypoints/openai/api_server.py``, 0.11):
with keys configured (``--api-key K [K ...]``, else ``VLLM_API_KEY``), every request whose
path starts with ``/v1`` needs ``Authorization: Bearer <one of the keys>``; OPTIONS and
every other path (``/health``, ``/metrics``) are open; a refusal is ``401
{"error": "Unauthorized"}``. Keys are kept as SHA-256 digests and compared in constant time.
``/metrics`` and ``/health`` stay open as on vLLM (probes and Prometheus scrape them);
the NetworkPolicy, not a key, limits who reaches them.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import Sequence

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware


def api_keys(flag: Sequence[str] | None, env: dict[str, str] | os._Environ[str] = os.environ) -> list[str]:
    """The keys in force: ``--api-key`` takes precedence over ``VLLM_API_KEY``, as in vLLM."""
    return [k for k in (list(flag) if flag else [env.get("VLLM_API_KEY", "")]) if k]


class ApiKeys:
    def __init__(self, tokens: Sequence[str]) -> None:
        self._digests = [hashlib.sha256(t.encode("utf-8")).digest() for t in tokens]

    def needs_key(self, method: str, path: str) -> bool:
        return bool(self._digests) and method != "OPTIONS" and path.startswith("/v1")

    def verify(self, authorization: str | None) -> bool:
        if not authorization:
            return False
        scheme, _, param = authorization.partition(" ")
        if scheme.lower() != "bearer":
            return False
        digest = hashlib.sha256(param.encode("utf-8")).digest()
        match = False
        for d in self._digests:  # every key compared: the time does not say which matched
            match |= secrets.compare_digest(digest, d)
        return match

    def middleware(self) -> Middleware:
        @web.middleware
        async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
            if self.needs_key(request.method, request.path) and not self.verify(request.headers.get("Authorization")):
                return web.json_response({"error": "Unauthorized"}, status=401)
            return await handler(request)

        return check
