"""The P/D KV handoff, shaped like vLLM's NixlConnector of the emulated version.

The prefill worker answers a ``do_remote_decode`` request with ``kv_transfer_params``
naming its engine, the blocks it holds, and the host/port of its side channel
(``VLLM_NIXL_SIDE_CHANNEL_HOST`` / ``_PORT``); 0.33 adds ``remote_request_id`` (NIXL
protocol v2), 0.11 sends none. The decode worker then really pulls over TCP: an HTTP
``POST /kv/pull`` to that side channel, which

1. reads the blocks by their ids, as a NIXL READ does (any version): the prefill side
   checks engine id and block ids against the blocks it still holds and waits until the
   transfer has crossed both links, booked with the simulator's link model
   (``pdserve.common.kvlink``: a transfer holds the sender's and the receiver's link, so
   pulls through one worker queue behind each other);
2. notifies the prefill side with a request id, as vLLM does after the READ
   (``notif_id = f"{request_id}:{tp_ratio}"``): in 0.33 the ``remote_request_id`` it was
   given, in 0.11 the decode worker's *own* request id
   (``nixl_connector.py`` ``_read_blocks``). The prefill side frees the blocks only if
   it knows that id; otherwise it logs vLLM's "unrecognized request" error and the blocks
   stay held until the lease expires (``_get_new_notifs``). So on 0.11 P and D pair only
   when the proxy gave both the same ``X-Request-Id`` on the same endpoint.

The payload is synthetic; the timing and every failure are real. As a mock-only check
the prefill side also returns a digest of the prompt it holds, and the decode side
refuses KV of a different prompt (vLLM would silently use it).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pdserve.common.kvlink import Link, serve_pull
from pdserve.worker.perf import PerfModel
from pdserve.worker.runner import EngineRunner


class KVTransferConfig(BaseModel):
    """The parts of vLLM's ``--kv-transfer-config`` the mock acts on (others are kept)."""

    model_config = ConfigDict(extra="allow")
    kv_connector: str | None = None
    kv_role: str | None = None
    engine_id: str | None = None
    # vLLM 0.33 config/kv_transfer.py: Literal["recompute", "fail"] = "fail". 0.11 has no such field and
    # no recovery (nixl_connector.py: "TODO: handle failure state ... we want to fail the request"), so
    # the mock fails the request there too unless told to recompute.
    kv_load_failure_policy: str = Field(default="fail", pattern="^(recompute|fail)$")
    kv_connector_extra_config: dict[str, Any] = Field(default_factory=dict)


class KvLoadError(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class PullRequest(BaseModel):
    engine_id: str
    block_ids: list[int]
    notif_request_id: str
    tp_ratio: int = 1
    # The receiver's link (pdserve.common.kvlink): how fast, and how long until it is free. A puller that
    # sends neither is taken to have a link like the sender's, free now.
    receiver_gbps: float | None = Field(default=None, gt=0)
    receiver_free_in_s: float = Field(default=0.0, ge=0)


@dataclass
class PullResult:
    num_tokens: int
    kv_bytes: int
    queued_s: float  # model seconds the transfer waited for a busy link (either end)
    transfer_s: float  # model seconds the bytes took to cross
    released: bool  # the prefill side recognised the notification and freed its blocks


def prompt_digest(token_ids: list[int]) -> str:
    """A mock-only fingerprint of a prompt, independent of vLLM's (possibly random) hash seed."""
    return hashlib.sha256(repr(token_ids).encode()).hexdigest()



class SideChannelServer:
    """Serves held KV blocks to decode workers (the prefill side of the handoff)."""

    def __init__(self, runner: EngineRunner, engine_id: str, perf: PerfModel, link_gbps: float, speedup: float) -> None:
        self.runner = runner
        self.engine_id = engine_id
        self.perf = perf
        self.link = Link(link_gbps)  # in the runner's model seconds
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

    async def _pull(self, request: web.Request) -> web.StreamResponse:
        try:
            body = PullRequest.model_validate(await request.json())
        except (ValidationError, ValueError) as err:
            return web.json_response({"reason": "bad_request", "detail": str(err)}, status=400)
        if body.engine_id != self.engine_id:
            return web.json_response(
                {"reason": "engine_mismatch", "detail": f"this side channel serves engine {self.engine_id}"},
                status=404)
        engine = self.runner.engine
        # The decode side reads only the blocks it does not have cached: the tail of the held ones (vLLM
        # nixl_connector.py _read_blocks: ``remote_block_ids = remote_block_ids[-num_local_blocks:]``).
        want = body.block_ids
        held = next((h.request for h in engine.held.values()
                     if want and h.request.block_ids[-len(want):] == want), None)
        if held is None:
            return web.json_response(
                {"reason": "not_found", "detail": "no KV held in those blocks (lease expired or never prefilled)"},
                status=404)
        n_tokens = len(held.prompt_token_ids)
        n_sent = n_tokens - (len(held.block_ids) - len(want)) * engine.config.block_size
        nbytes = int(n_sent * self.perf.kv_bytes_per_token)
        now = self.runner.sim_now()
        tr = serve_pull(self.link, nbytes, now, receiver_gbps=body.receiver_gbps or self.link.gbps,
                        receiver_free_in_s=body.receiver_free_in_s)
        # Two lines: the schedule at once (the puller books its own link from it and lets its next pull
        # go), then the outcome once the bytes have crossed.
        resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await resp.prepare(request)
        await resp.write(_line({"queued_s": tr.start_s - now, "transfer_s": tr.end_s - tr.start_s, "kv_bytes": nbytes}))
        await asyncio.sleep((tr.end_s - now) / self.speedup)
        if engine.get_held(held.request_id) is not held:
            outcome: dict[str, Any] = {"reason": "not_found", "detail": "lease expired during the transfer"}
        else:
            released = self.runner.release_kv(body.notif_request_id)
            if not released:
                # vLLM: "Potentially invalid KV blocks for unrecognized request %s were retrieved by a decode
                # worker. They may have expired." -- and the blocks wait for the lease to run out.
                print(f"pdserve worker: KV blocks for unrecognized request {body.notif_request_id} were retrieved "
                      "by a decode worker; they stay held until the lease expires", file=sys.stderr, flush=True)
            self.pulls_served += 1
            outcome = {"num_tokens": n_tokens, "prompt_digest": prompt_digest(held.prompt_token_ids),
                       "released": released}
        await resp.write(_line(outcome))
        await resp.write_eof()
        return resp


def _line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj).encode() + b"\n"


def notif_request_id(params: dict[str, Any], own_request_id: str, with_remote_request_id: bool) -> str:
    """The id the decode side notifies the prefill side with; raises KvLoadError for params that
    version's connector calls "invalid KVTransferParams" (it then does no transfer)."""
    required = ["remote_engine_id", "remote_host", "remote_port"]
    if with_remote_request_id:
        required.append("remote_request_id")
    missing = [k for k in required if params.get(k) is None]
    if missing or not params.get("remote_block_ids"):
        raise KvLoadError("invalid_params", "Got invalid KVTransferParams (missing "
                          f"{', '.join(missing) or 'remote_block_ids'}); this request will not utilize KVTransfer")
    return str(params["remote_request_id"]) if with_remote_request_id else own_request_id


# Wall seconds a pull waits for the sender's schedule before letting the next pull through: a sender that
# has not answered by then (hung, or its node gone) is not moving bytes over this link.
SCHEDULE_WAIT_S = 1.0


class KvReceiver:
    """The decode side of the hand-off: pulls KV over this worker's link.

    The link model holds the receiver's link from a transfer's start to its end, but that end is known only
    from the sender's schedule (its own link may be busy). So a pull waits for the previous one's schedule
    (asyncio.Lock is FIFO, so in arrival order), books this link from its own, and lets the next one go: the
    queue the simulator's receiver link forms. Times are the runner's model seconds, as on the sending side."""

    def __init__(self, runner: EngineRunner, link_gbps: float) -> None:
        self.runner = runner
        self.link = Link(link_gbps)
        self._turn = asyncio.Lock()

    async def pull(self, session: aiohttp.ClientSession, params: dict[str, Any], prompt_ids: list[int],
                   notif_id: str, timeout_s: float, cached_blocks: int = 0) -> PullResult:
        """Pull all but the first ``cached_blocks`` blocks (those this worker's prefix cache holds)."""
        await self._turn.acquire()
        holding = True

        def release() -> None:
            nonlocal holding
            if holding:
                holding = False
                self._turn.release()

        sent = self.runner.sim_now()

        def booked(queued_s: float, transfer_s: float, nbytes: int) -> None:
            self.link.book(sent + queued_s + transfer_s, nbytes, transfer_s)
            release()

        task = asyncio.ensure_future(pull_kv(
            session, params, prompt_ids, notif_id, timeout_s, receiver=self.link,
            free_in_s=max(0.0, self.link.free_at - sent), skip_blocks=cached_blocks, on_schedule=booked))
        try:
            await asyncio.wait({task}, timeout=SCHEDULE_WAIT_S)
            release()
            return await task
        except BaseException:
            task.cancel()
            raise
        finally:
            release()


async def pull_kv(
    session: aiohttp.ClientSession, params: dict[str, Any], prompt_ids: list[int], notif_id: str, timeout_s: float,
    *, receiver: Link, free_in_s: float, skip_blocks: int = 0,
    on_schedule: Callable[[float, float, int], None] | None = None,
) -> PullResult:
    """Fetch a prompt's KV from the prefill worker named in ``kv_transfer_params``, then notify it.

    ``receiver`` is this side's link, free in ``free_in_s`` model seconds (``KvReceiver`` keeps both);
    ``on_schedule(queued_s, transfer_s, kv_bytes)`` is called as soon as the sender has booked the transfer."""
    try:
        host = str(params["remote_host"])
        port = int(params["remote_port"])
        payload = {
            "engine_id": str(params["remote_engine_id"]),
            "block_ids": [int(b) for b in params["remote_block_ids"]][skip_blocks:],
            "notif_request_id": notif_id,
            "receiver_gbps": receiver.gbps,
            "receiver_free_in_s": free_in_s,
        }
    except (KeyError, TypeError, ValueError) as err:
        raise KvLoadError("bad_params", f"kv_transfer_params incomplete or malformed: {err!r}") from None
    url = f"http://{host}:{port}/kv/pull"
    try:
        async with session.post(url, json=payload, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            if resp.status != 200:
                data = await resp.json(content_type=None)
                raise KvLoadError(str(data.get("reason", f"http_{resp.status}")), str(data.get("detail", "")))
            head = json.loads(await resp.content.readline())
            queued_s, transfer_s, kv_bytes = float(head["queued_s"]), float(head["transfer_s"]), int(head["kv_bytes"])
            if on_schedule is not None:
                on_schedule(queued_s, transfer_s, kv_bytes)
            data = json.loads(await resp.content.readline())
    except (TimeoutError, aiohttp.ClientError, OSError) as err:
        raise KvLoadError("unreachable", f"side channel {host}:{port}: {err!r}") from None
    except (ValueError, KeyError, TypeError) as err:  # cut off mid-transfer, or not a side channel's answer
        raise KvLoadError("unreachable", f"side channel {host}:{port} broke off the transfer: {err!r}") from None
    if "reason" in data:
        raise KvLoadError(str(data["reason"]), str(data.get("detail", "")))
    if data.get("prompt_digest") != prompt_digest(prompt_ids) or data.get("num_tokens") != len(prompt_ids):
        raise KvLoadError("prompt_mismatch", "the remote KV belongs to a different prompt")
    return PullResult(int(data["num_tokens"]), kv_bytes, queued_s, transfer_s, bool(data.get("released")))
