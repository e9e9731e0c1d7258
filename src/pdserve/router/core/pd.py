"""Request rewriting for vLLM's P/D handoff and for mid-stream migration (pure).

Follows vLLM's NixlConnector proxy (tests/v1/kv_connector/nixl_integration/
toy_proxy_server.py): the prefill request is the client's request with
``max_tokens=1`` (and ``max_completion_tokens=1`` when present), ``stream=false``,
``stream_options``/``min_tokens``/``min_completion_tokens`` removed and
``kv_transfer_params`` asking for a remote decode; the decode request is the
client's request, untouched except for the ``kv_transfer_params`` the prefill
response returned, forwarded verbatim.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

PREFILL_KV_PARAMS: dict[str, Any] = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}

# Sampling fields a /v1/completions continuation can carry over from either API.
_CARRY_OVER = (
    "temperature", "top_p", "top_k", "min_p", "seed", "stop", "stop_token_ids", "presence_penalty",
    "frequency_penalty", "repetition_penalty", "ignore_eos", "logit_bias", "user", "skip_special_tokens",
)


def prefill_request(body: Mapping[str, Any]) -> dict[str, Any]:
    req = dict(body)
    req["kv_transfer_params"] = dict(PREFILL_KV_PARAMS)
    req["stream"] = False
    req["max_tokens"] = 1
    if "max_completion_tokens" in req:
        req["max_completion_tokens"] = 1
    req.pop("stream_options", None)
    req.pop("min_tokens", None)
    req.pop("min_completion_tokens", None)
    return req


def decode_request(body: Mapping[str, Any], kv_transfer_params: Mapping[str, Any] | None) -> dict[str, Any]:
    req = dict(body)
    if kv_transfer_params:
        req["kv_transfer_params"] = kv_transfer_params
    return req


def remaining_tokens(body: Mapping[str, Any], generated: int) -> int | None:
    """Tokens still allowed after ``generated``; None when the client set no limit."""
    limit = body.get("max_completion_tokens") if body.get("max_completion_tokens") is not None else body.get("max_tokens")
    if limit is None:
        return None
    return max(int(limit) - generated, 0)


def continuation_request(
    body: Mapping[str, Any],
    prompt_ids: Sequence[int],
    generated_ids: Sequence[int],
) -> dict[str, Any]:
    """A /v1/completions request that resumes a stream on another worker.

    The new worker gets the original prompt's token ids followed by the tokens already
    streamed to the client, and only the remaining token budget. Token ids (not text)
    so that no chat template or BOS is applied twice. Always streams; usage is asked
    for so the router can report totals for the whole request.
    """
    req: dict[str, Any] = {k: copy.deepcopy(body[k]) for k in _CARRY_OVER if k in body}
    req["model"] = body.get("model")
    req["prompt"] = list(prompt_ids) + list(generated_ids)
    req["stream"] = True
    req["stream_options"] = {"include_usage": True}
    left = remaining_tokens(body, len(generated_ids))
    if left is not None:
        req["max_tokens"] = left
    min_tokens = body.get("min_tokens")
    if min_tokens:
        req["min_tokens"] = max(int(min_tokens) - len(generated_ids), 0)
    return req
