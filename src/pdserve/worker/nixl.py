"""The P/D KV handoff, shaped like vLLM's NixlConnector.

The prefill worker answers a ``do_remote_decode`` request with ``kv_transfer_params``
naming its engine, the request and the blocks it holds, and the host/port of its side
channel (``VLLM_NIXL_SIDE_CHANNEL_HOST`` / ``_PORT``). The decode worker then really
pulls over TCP: an HTTP ``POST /kv/pull`` to that side channel. The prefill side checks
engine id, request id and block ids against the blocks it still holds, waits the
modelled transfer time (KV bytes / link bandwidth), releases the blocks (vLLM frees
them once the decode side has read them) and returns the prompt's block hashes so the
decode side can verify it received the KV of *its* prompt. The payload is synthetic;
the timing and every failure are real.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pdserve.common import hashing
from pdserve.worker.perf import PerfModel
from pdserve.worker.runner import EngineRunner


class KVTransferConfig(BaseModel):
    """The parts of vLLM's ``--kv-transfer-config`` the mock acts on (others are kept)."""

    model_config = ConfigDict(extra="allow")
    kv_connector: str | None = None
    kv_role: str | None = None
    engine_id: str | None = None
    kv_load_failure_policy: str = Field(default="recompute", pattern="^(recompute|fail)$")
    kv_connector_extra_config: dict[str, Any] = Field(default_factory=dict)


class KvLoadError(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class PullRequest(BaseModel):
    engine_id: str
    request_id: str
    block_ids: list[int]


@dataclass
class PullResult:
    num_tokens: int
    block_hashes: list[int]
    kv_bytes: int
    transfer_s: float


class SideChannelServer:
    """Serves held KV blocks to decode workers (the prefill side of the handoff)."""

    def __init__(self, runner: EngineRunner, engine_id: str, perf: PerfModel, link_gbps: float, speedup: float) -> None:
        self.runner = runner
        self.engine_id = engine_id
        self.perf = perf
        self.link_gbps = link_gbps
        self.speedup = speedup
        self._web: web.AppRunner | None = None
        self.port = 0
        self.pulls_served = 0

    async def start(self, host: str, port: int) -> int:
        app = web.Application()
        app.router.add_post("/kv/pull", self._pull)
        self._web = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._web.setup()
        site = web.TCPSite(self._web, host, port, reuse_address=True)
        await site.start()
        server = site._server  # aiohttp exposes the bound socket only here
        assert server is not None and server.sockets  # type: ignore[attr-defined]
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        return self.port

    async def stop(self) -> None:
        if self._web is not None:
            await self._web.cleanup()
            self._web = None

    async def _pull(self, request: web.Request) -> web.Response:
        try:
            body = PullRequest.model_validate(await request.json())
        except (ValidationError, ValueError) as err:
            return web.json_response({"reason": "bad_request", "detail": str(err)}, status=400)
        if body.engine_id != self.engine_id:
            return web.json_response(
                {"reason": "engine_mismatch", "detail": f"this side channel serves engine {self.engine_id}"},
                status=404)
        held = self.runner.engine.get_held(body.request_id)
        if held is None:
            return web.json_response(
                {"reason": "not_found", "detail": f"no KV held for request {body.request_id} (lease expired or never prefilled)"},
                status=404)
        if held.block_ids != body.block_ids:
            return web.json_response({"reason": "block_mismatch", "detail": "block ids differ from the held ones"},
                                     status=409)
        n_tokens = len(held.prompt_token_ids)
        transfer_s = self.perf.kv_transfer_time(n_tokens, self.link_gbps)
        await asyncio.sleep(transfer_s / self.speedup)
        if self.runner.engine.get_held(body.request_id) is None:
            return web.json_response({"reason": "not_found", "detail": "lease expired during the transfer"}, status=404)
        bs = self.runner.engine.config.block_size
        hashes = [hashing.to_external(h) for h in hashing.block_hashes(held.prompt_token_ids, bs)]
        self.runner.release_kv(body.request_id)
        self.pulls_served += 1
        return web.json_response({
            "num_tokens": n_tokens,
            "block_hashes": hashes,
            "kv_bytes": int(n_tokens * self.perf.kv_bytes_per_token),
            "transfer_s": transfer_s,
        })


async def pull_kv(
    session: aiohttp.ClientSession, params: dict[str, Any], prompt_ids: list[int], block_size: int, timeout_s: float
) -> PullResult:
    """Fetch a prompt's KV from the prefill worker named in ``kv_transfer_params``."""
    try:
        host = str(params["remote_host"])
        port = int(params["remote_port"])
        payload = {
            "engine_id": str(params["remote_engine_id"]),
            "request_id": str(params.get("remote_request_id") or ""),
            "block_ids": [int(b) for b in params["remote_block_ids"]],
        }
    except (KeyError, TypeError, ValueError) as err:
        raise KvLoadError("bad_params", f"kv_transfer_params incomplete or malformed: {err!r}") from None
    url = f"http://{host}:{port}/kv/pull"
    try:
        async with session.post(url, json=payload, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            data = await resp.json(content_type=None)
            if resp.status != 200:
                raise KvLoadError(str(data.get("reason", f"http_{resp.status}")), str(data.get("detail", "")))
    except (TimeoutError, aiohttp.ClientError, OSError) as err:
        raise KvLoadError("unreachable", f"side channel {host}:{port}: {err!r}") from None
    expected = [hashing.to_external(h) for h in hashing.block_hashes(prompt_ids, block_size)]
    if data.get("block_hashes") != expected or data.get("num_tokens") != len(prompt_ids):
        raise KvLoadError("prompt_mismatch", "the remote KV belongs to a different prompt")
    return PullResult(int(data["num_tokens"]), list(data["block_hashes"]), int(data["kv_bytes"]),
                      float(data["transfer_s"]))
