"""The mock worker's HTTP API (aiohttp): vLLM's OpenAI-compatible endpoints.

Request ids follow the emulated version (``vllm_emulation``): the response ``id`` is
``cmpl-{X-Request-Id}`` / ``chatcmpl-{X-Request-Id}`` (``serving_completion.py`` /
``serving_chat.py``), the engine's id adds ``-0`` for a completion's first prompt
(``request_id_item``) and, from 0.33 on, 8 random characters
(``v1/engine/input_processor.py`` ``assign_request_id``). P/D pairing keys on the engine id.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from pdserve.common.openai_protocol import StreamOptions
from pdserve.tokenization import ChatTemplateError, ModelTokenizer
from pdserve.worker import protocol
from pdserve.worker.engine import FINISH_ABORT, FINISH_STOP, EngineRequest, TokenEvent
from pdserve.worker.nixl import KvLoadError, KvReceiver, KVTransferConfig, notif_request_id
from pdserve.worker.protocol import ApiError, bad_request
from pdserve.worker.runner import EngineRunner, Tracked
from pdserve.worker.vllm_emulation import CURRENT_VERSION, VllmBehaviour, behaviour
from pdserve.worker.vllm_hash import cache_salt_extra_keys

_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
_DONE = b"data: [DONE]\n\n"


@dataclass
class ServerSettings:
    model: str
    served_model_names: list[str]
    max_model_len: int
    engine_id: str
    tp_size: int
    side_channel_host: str
    side_channel_port: int = 0  # filled in once the side channel is bound
    kv_transfer: KVTransferConfig = field(default_factory=KVTransferConfig)
    kv_pull_timeout_s: float = 30.0
    kv_link_gbps: float = 100.0  # --mock-kv-link-gbps: this worker's end of every KV transfer
    mean_output_tokens: int = 256
    vllm: VllmBehaviour = field(default_factory=lambda: behaviour(CURRENT_VERSION))


class WorkerServer:
    def __init__(self, settings: ServerSettings, runner: EngineRunner, tokenizer: ModelTokenizer) -> None:
        self.s = settings
        self.runner = runner
        self.tok = tokenizer
        self._pieces: dict[int, str] = {}
        self.draining = False
        self.active = 0
        self.started = int(runner.clock.now())
        self._session: aiohttp.ClientSession | None = None
        self._pacer = _Pacer()
        self.kv_receiver = KvReceiver(runner, settings.kv_link_gbps)

    def app(self, max_body_bytes: int) -> web.Application:
        app = web.Application(client_max_size=max_body_bytes, middlewares=[self._errors])
        r = app.router
        r.add_post("/v1/completions", self.completions)
        r.add_post("/v1/chat/completions", self.chat_completions)
        r.add_get("/v1/models", self.models)
        r.add_get("/health", self.health)
        r.add_get("/ping", self.health)
        r.add_post("/ping", self.health)
        r.add_get("/version", self.version)
        r.add_get("/load", self.load)
        r.add_get("/metrics", self.metrics)
        r.add_post("/reset_prefix_cache", self.reset_prefix_cache)
        app.on_cleanup.append(self._close_session)
        return app

    async def _close_session(self, _app: web.Application) -> None:
        if self._session is not None:
            await self._session.close()

    @web.middleware
    async def _errors(self, request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiError as err:
            return web.json_response(err.body(), status=err.status)
        except web.HTTPRequestEntityTooLarge as err:
            return web.json_response(ApiError(413, f"request body too large: {err.text}").body(), status=413)
        except web.HTTPException as err:
            if err.status >= 400:
                return web.json_response(ApiError(err.status, err.reason or "error").body(), status=err.status)
            raise

    # --- simple endpoints ----------------------------------------------------
    async def health(self, _request: web.Request) -> web.Response:
        return web.Response(status=503 if self.draining else 200)

    async def version(self, _request: web.Request) -> web.Response:
        return web.json_response({"version": self.s.vllm.version, "pdserve_mock": True})

    async def load(self, _request: web.Request) -> web.Response:
        return web.json_response({"server_load": self.runner.inflight})

    async def metrics(self, request: web.Request) -> web.Response:
        self.runner.metrics.update_engine(self.runner.engine.stats())
        body, content_type = self.runner.metrics.render(request.headers.get("Accept", ""))
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def reset_prefix_cache(self, _request: web.Request) -> web.Response:
        if not self.runner.reset_prefix_cache():
            raise ApiError(400, "cannot reset the prefix cache while requests hold KV blocks")
        return web.Response(status=200)

    async def models(self, _request: web.Request) -> web.Response:
        data: list[dict[str, Any]] = [{"id": name, "object": "model", "created": self.started, "owned_by": "vllm", "root": self.s.model,
                 "parent": None, "max_model_len": self.s.max_model_len, "permission": []}
                for name in self.s.served_model_names]
        return web.json_response({"object": "list", "data": data})

    # --- generation ----------------------------------------------------------
    async def completions(self, request: web.Request) -> web.StreamResponse:
        req = protocol.parse(protocol.CompletionRequest, await self._json(request))
        model = self._check_model(req.model)
        ids = self._prompt_ids(req.prompt, req.add_special_tokens)
        return await self._generate(request, req, model, ids, chat=False, max_tokens=req.max_tokens)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        req = protocol.parse(protocol.ChatCompletionRequest, await self._json(request))
        model = self._check_model(req.model)
        try:
            ids = self.tok.chat_ids([m.model_dump(exclude_none=True) for m in req.messages],
                                    add_generation_prompt=req.add_generation_prompt,
                                    continue_final_message=req.continue_final_message,
                                    add_special_tokens=req.add_special_tokens,
                                    tools=req.tools,
                                    chat_template_kwargs=req.chat_template_kwargs)
        except (ChatTemplateError, TypeError) as err:
            raise bad_request(str(err), "messages") from None
        max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
        return await self._generate(request, req, model, ids, chat=True, max_tokens=max_tokens)

    async def _json(self, request: web.Request) -> Any:
        if self.draining:
            raise ApiError(503, "the server is shutting down")
        await self._pacer.wait()
        raw = await request.read()
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise bad_request(f"malformed JSON body: {err}") from None

    def _check_model(self, name: str | None) -> str:
        if name is None:
            return self.s.served_model_names[0]
        if name not in self.s.served_model_names:
            raise ApiError(404, f"The model `{name}` does not exist.", "model")
        return name

    def _prompt_ids(self, prompt: str | list[int] | list[str] | list[list[int]], add_special_tokens: bool) -> list[int]:
        if isinstance(prompt, str):
            return self.tok.completion_ids(prompt, add_special_tokens=add_special_tokens)
        if prompt and all(isinstance(p, int) for p in prompt):
            ids = [int(p) for p in prompt]  # type: ignore[arg-type]
            self._check_vocab(ids)
            return ids
        if len(prompt) == 1:
            only = prompt[0]
            return self._prompt_ids(only, add_special_tokens)  # type: ignore[arg-type]
        raise bad_request("prompt must be one string or one list of token ids (batched prompts are not supported)",
                          "prompt")

    def _check_vocab(self, ids: list[int]) -> None:
        """vLLM refuses ids past ``max(tokenizer.max_token_id, vocab_size - 1)`` with a 400 (0.11
        ``v1/engine/processor.py``, 0.33 ``renderers/base.py`` ``validate_token_ids``; 0.33 also refuses
        negative ids, which the mock does for both versions since it cannot embed them either)."""
        lo, hi = min(ids), max(ids)
        if lo < 0:
            raise bad_request(f"Token id {lo} is out of vocabulary")
        if hi >= self.tok.vocab_size:
            raise bad_request(f"Token id {hi} is out of vocabulary")

    def _validate_lengths(self, n_prompt: int, max_tokens: int | None, min_tokens: int, chat: bool) -> int:
        limit = self.s.max_model_len
        if n_prompt == 0:
            raise bad_request("the prompt is empty", "messages" if chat else "prompt")
        if n_prompt >= limit:
            raise bad_request(
                f"This model's maximum context length is {limit} tokens. However, your request has {n_prompt} "
                "input tokens. Please reduce the length of the input messages.", "messages" if chat else "prompt")
        if max_tokens is None:
            max_tokens = limit - n_prompt
        if max_tokens < 1:
            raise bad_request(f"max_tokens must be at least 1, got {max_tokens}.", "max_tokens")
        if n_prompt + max_tokens > limit:
            raise bad_request(
                f"'max_tokens' is too large: {max_tokens}. This model's maximum context length is {limit} tokens "
                f"and your request has {n_prompt} input tokens ({max_tokens} > {limit} - {n_prompt}).", "max_tokens")
        if min_tokens > max_tokens:
            raise bad_request(f"min_tokens ({min_tokens}) must be less than or equal to max_tokens ({max_tokens}).",
                              "min_tokens")
        return max_tokens

    def _piece(self, token_id: int) -> str:
        """The text of one generated token (the mock samples from a few hundred ids: cache them)."""
        piece = self._pieces.get(token_id)
        if piece is None:
            piece = self._pieces[token_id] = self.tok.decode([token_id])
        return piece

    def _natural_length(self, seed: int) -> int:
        """Where the mock model emits EOS: exponential around mean_output_tokens, fixed by the seed."""
        u = (int.from_bytes(hashlib.blake2b(seed.to_bytes(16, "big", signed=True), digest_size=8).digest(), "big")
             + 1) / 2**64
        return 1 + int(-self.s.mean_output_tokens * math.log(u))

    async def _generate(self, request: web.Request, req: Any, model: str, ids: list[int], chat: bool,
                        max_tokens: int | None) -> web.StreamResponse:
        max_tokens_param = max_tokens  # as the client sent it (for vllm:request_params_max_tokens)
        max_tokens = self._validate_lengths(len(ids), max_tokens, req.min_tokens, chat)
        base = request.headers.get("X-Request-Id") or uuid.uuid4().hex
        resp_id = f"{'chatcmpl' if chat else 'cmpl'}-{base}"
        rid = resp_id if chat else f"{resp_id}-0"
        if self.s.vllm.internal_request_id_suffix or self.runner.engine.knows(rid):
            rid = f"{rid}-{uuid.uuid4().hex[:8]}"
        kvp = req.kv_transfer_params or {}
        hold = bool(kvp.get("do_remote_decode"))
        extra = cache_salt_extra_keys(req.cache_salt, self.s.vllm.version)
        engine_cfg = self.runner.engine.config
        # Hash the prompt here, per request, rather than inside the engine step: a step admitting
        # dozens of long prompts would otherwise hash them all in one go and stall the loop.
        hashes = (engine_cfg.hasher.block_hashes(ids, engine_cfg.block_size, extra)
                  if engine_cfg.enable_prefix_caching else [])
        external = 0
        if kvp.get("do_remote_prefill"):
            # Like vLLM's connector, pull only what the prefix cache lacks (it may be evicted before the
            # request is admitted; the engine then still treats the prompt as transferred).
            cached = len(self.runner.engine.pool.find_prefix(hashes, (len(ids) - 1) // engine_cfg.block_size))
            external = await self._load_remote(kvp, ids, rid, cached)
        seed = req.seed if req.seed is not None else int.from_bytes(
            hashlib.blake2b(str(ids).encode(), digest_size=8).digest(), "big")
        stop_ids = tuple(req.stop_token_ids or ())
        ereq = EngineRequest(rid, ids, max_tokens=max_tokens, min_tokens=req.min_tokens, ignore_eos=req.ignore_eos,
                             eos_after=None if self.tok.eos_token_id is None else self._natural_length(seed),
                             stop_token_ids=stop_ids, seed=seed,
                             hold_kv=hold, remote_prefilled=external > 0, extra_keys=extra)
        if engine_cfg.enable_prefix_caching:
            ereq.block_hashes = hashes
        try:
            tracked = self.runner.submit(ereq, max_tokens_param, external)
        except ValueError as err:
            raise bad_request(str(err)) from None
        if self.runner.tracer is not None:  # vLLM's llm_request span joins the caller's trace
            from pdserve.worker.tracing import trace_headers

            tracked.trace_headers = trace_headers(request.headers)
            tracked.trace_params = {"top_p": req.top_p, "max_tokens": max_tokens_param,
                                    "temperature": req.temperature, "n": req.n}
        self.active += 1
        try:
            gen = _TextStream(self.runner, tracked, req.stop_strings(), req.include_stop_str_in_output, self._piece)
            if req.stream:
                return await self._stream(request, gen, resp_id, model, chat, req.stream_options, len(ids))
            async for _ in gen.pieces():
                pass
            kv_out = self._kv_params(rid, tracked) if hold else None
            fields = (resp_id, model, int(self.runner.clock.now()), gen.text, gen.finish, gen.stop_reason, len(ids), tracked.n_out,
                      kv_out)
            body = (protocol.chat_response(*fields, reasoning_field=self.s.vllm.chat_reasoning_field) if chat
                    else protocol.completion_response(*fields))
            return web.json_response(body)
        finally:
            self.active -= 1
            if not tracked.done:  # client went away or the handler failed: free the engine's resources
                self.runner.finish_early(rid, FINISH_ABORT)

    async def _stream(self, request: web.Request, gen: _TextStream, rid: str, model: str, chat: bool,
                      opts: StreamOptions | None, n_prompt: int) -> web.StreamResponse:
        resp = web.StreamResponse(headers=_SSE_HEADERS)
        await resp.prepare(request)
        created = int(self.runner.clock.now())
        if chat:
            first = protocol.chat_chunk(rid, model, created, {"role": "assistant", "content": ""}, None, None)
            await resp.write(_sse(first))
        # Mid-stream chunks differ only in their text: splice it into pre-encoded bytes (same JSON as
        # json.dumps of the full chunk) and serialize the whole object only for the final one.
        if chat:
            head, tail = _split_template(protocol.chat_chunk(rid, model, created, {"content": _MARK}, None, None))
        else:
            head, tail = _split_template(protocol.completion_chunk(rid, model, created, _MARK, None, None))
        async for piece in gen.pieces():
            if not gen.finished:
                await resp.write(head + json.dumps(piece).encode() + tail)
                continue
            if chat:
                chunk = protocol.chat_chunk(rid, model, created, {"content": piece}, gen.finish, gen.stop_reason)
            else:
                chunk = protocol.completion_chunk(rid, model, created, piece, gen.finish, gen.stop_reason)
            await resp.write(_sse(chunk))
        if opts is not None and opts.include_usage:
            obj = "chat.completion.chunk" if chat else "text_completion"
            await resp.write(_sse(protocol.usage_chunk(rid, obj, model, created, n_prompt, gen.tracked.n_out)))
        await resp.write(_DONE)
        await resp.write_eof()
        return resp

    def _kv_params(self, rid: str, tracked: Tracked) -> dict[str, Any] | None:
        if not tracked.held_block_ids or self.runner.engine.get_held(rid) is None:
            return None
        if not self.s.vllm.nixl_remote_request_id:
            # 0.11 nixl_connector.py request_finished: no request id; D notifies with its own
            return {
                "do_remote_prefill": True,
                "do_remote_decode": False,
                "remote_block_ids": tracked.held_block_ids,
                "remote_engine_id": self.s.engine_id,
                "remote_host": self.s.side_channel_host,
                "remote_port": self.s.side_channel_port,
                "tp_size": self.s.tp_size,
            }
        # 0.33 nixl/pull_scheduler.py request_finished (P node, pull mode, no DCP/PP)
        return {
            "do_remote_prefill": True,
            "do_remote_decode": False,
            "remote_block_ids": tracked.held_block_ids,
            "remote_engine_id": self.s.engine_id,
            "remote_request_id": rid,
            "remote_host": self.s.side_channel_host,
            "remote_port": self.s.side_channel_port,
            "tp_size": self.s.tp_size,
            "dcp_size": 1,
            "pp_size": 1,
            "remote_num_tokens": len(tracked.req.prompt_token_ids),
            "remote_blocks_expiry_time": None,
            "remote_registration_generation": 0,
            "transfer_mode": "pull",
        }

    async def _load_remote(self, kvp: dict[str, Any], ids: list[int], rid: str, cached_blocks: int) -> int:
        """Pull the prompt's KV past its ``cached_blocks``; returns the prompt's tokens, or 0 to recompute
        (policy ``recompute``)."""
        if self._session is None:
            self._session = aiohttp.ClientSession()
        policy = self.s.kv_transfer.kv_load_failure_policy
        t0 = self.runner.clock.monotonic()
        try:
            notif = notif_request_id(kvp, rid, self.s.vllm.nixl_remote_request_id)
            result = await self.kv_receiver.pull(self._session, kvp, ids, notif, self.s.kv_pull_timeout_s,
                                                 cached_blocks)
        except KvLoadError as err:
            self.runner.metrics.kv_load_failure(err.reason, policy)
            if policy == "fail":
                raise ApiError(500, f"KV transfer from the prefill worker failed ({err.reason}): {err.detail}",
                               "kv_transfer_params", "KVTransferError") from None
            return 0
        self.runner.metrics.kv_transfers.inc()
        took = self.runner.clock.monotonic() - t0  # wall seconds, as vLLM measures it
        self.runner.metrics.kv_transfer_time.observe(took)
        self.runner.metrics.nixl_xfer_time.observe(took)
        self.runner.metrics.nixl_bytes.observe(result.kv_bytes)
        return result.num_tokens


class _Pacer:
    """Admits at most ``per_tick`` request handlers per event-loop iteration.

    Closed-loop clients finish together and send their next requests together; parsing and tokenizing
    256 prompts in one loop iteration would stall every stream (and /health) for tens of ms. Spreading
    the burst over iterations bounds that stall without refusing anything.
    """

    def __init__(self, per_tick: int = 32) -> None:
        self.per_tick = per_tick
        self._used = 0
        self._reset_pending = False

    async def wait(self) -> None:
        while self._used >= self.per_tick:
            await asyncio.sleep(0)
        self._used += 1
        if not self._reset_pending:
            self._reset_pending = True
            asyncio.get_running_loop().call_soon(self._reset)

    def _reset(self) -> None:
        self._used = 0
        self._reset_pending = False


class _TextStream:
    """Turns a request's token events into text pieces, applying stop strings like vLLM."""

    def __init__(self, runner: EngineRunner, tracked: Tracked, stops: list[str], include_stop: bool,
                 piece: Callable[[int], str]) -> None:
        self.runner = runner
        self.tracked = tracked
        self.stops = stops
        self.include_stop = include_stop
        self.piece = piece
        self.holdback = max((len(s) for s in stops), default=1) - 1
        self.text = ""
        self.emitted = 0
        self._checked = 0
        self.finished = False
        self.finish: str | None = None
        self.stop_reason: str | int | None = None

    async def pieces(self) -> AsyncIterator[str]:
        queue = self.tracked.queue
        while not self.finished:
            ev: TokenEvent = await queue.get()
            if ev.token_id >= 0:
                self.text += self.piece(ev.token_id)
                if (ev.finished and ev.finish_reason == FINISH_STOP
                        and ev.token_id != self.runner.engine.config.eos_token_id):
                    self.stop_reason = ev.token_id  # a stop_token_ids hit
            if ev.finished:
                self.finished, self.finish = True, ev.finish_reason
            elif self.stops and self._check_stop():
                self.runner.finish_early(self.tracked.req.request_id, FINISH_STOP)
                self.finished, self.finish = True, FINISH_STOP
            end = len(self.text) if self.finished else len(self.text) - self.holdback
            if end > self.emitted or self.finished:
                piece = self.text[self.emitted:end]
                self.emitted = max(self.emitted, end)
                yield piece

    def _check_stop(self) -> bool:
        # A stop string can start at most `holdback` characters before the new text.
        offset = max(0, self._checked - self.holdback)
        window = self.text[offset:]
        self._checked = len(self.text)
        for s in self.stops:
            i = window.find(s)
            if i >= 0:
                cut = offset + i + (len(s) if self.include_stop else 0)
                self.text = self.text[:cut]
                self.stop_reason = s
                return True
        return False


_MARK = "\x00pdserve-text\x00"


def _sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _split_template(obj: dict[str, Any]) -> tuple[bytes, bytes]:
    head, tail = _sse(obj).split(json.dumps(_MARK).encode())
    return head, tail
