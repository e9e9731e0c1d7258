"""The mock worker's and the router's responses, SSE chunks and errors, and the requests the
router sends to workers, parse with vLLM's OpenAI protocol models, per supported version,
and carry no field those models do not declare.

Judge: 0.11 ``vllm/entrypoints/openai/protocol.py``; 0.33 ``vllm/entrypoints/openai/
completion/protocol.py``, ``.../chat_completion/protocol.py``, ``vllm/entrypoints/serve/
engine/protocol.py`` (``ErrorResponse``).
"""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from pdserve.api.vllm_versions import VERSIONS
from pdserve.router.core import pd
from pdserve.router.core.spec import RoutingSpec
from tests.conformance.conftest import Counts
from tests.conformance.pd_workers import MODEL, pd_pair
from tests.conformance.vllm_env import run_probe
from tests.router.conftest import read_sse, router_config, run_router

PROMPT = "the model token cache and the river city music " * 6
COMPLETION = {"model": MODEL, "prompt": PROMPT, "max_tokens": 5, "ignore_eos": True}
CHAT = {"model": MODEL, "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": PROMPT}],
        "max_completion_tokens": 5, "ignore_eos": True}
STREAM = {"stream": True, "stream_options": {"include_usage": True}}
# Malformed requests: each must come back as vLLM's ErrorResponse.
BAD = [
    ("/v1/completions", {**COMPLETION, "max_tokens": -1}),
    ("/v1/completions", {"model": MODEL}),
    ("/v1/chat/completions", {**CHAT, "messages": []}),
    ("/v1/chat/completions", {**CHAT, "temperature": "hot"}),
]


async def _collect(session: aiohttp.ClientSession, base: str, who: str) -> list[tuple[str, str, Any]]:
    """(where, vLLM model name, body) for every answer ``base`` gives."""
    items: list[tuple[str, str, Any]] = []
    for path, body, kind in (("/v1/completions", COMPLETION, "Completion"), ("/v1/chat/completions", CHAT, "ChatCompletion")):
        async with session.post(base + path, json=body) as r:
            assert r.status == 200, await r.text()
            items.append((f"{who} {path}", f"{kind}Response", await r.json()))
        async with session.post(base + path, json={**body, **STREAM}) as r:
            assert r.status == 200, await r.text()
            events = await read_sse(r)
            assert events[-1] == "[DONE]"
            items += [(f"{who} {path} stream[{i}]", f"{kind}StreamResponse", e) for i, e in enumerate(events[:-1])]
    for path, body in BAD:
        async with session.post(base + path, json=body) as r:
            assert r.status == 400, (who, path, body, r.status)
            items.append((f"{who} {path} error", "ErrorResponse", await r.json()))
    return items


def _worker_requests() -> list[tuple[str, str, Any]]:
    """What the router sends to workers: P/D rewrites and a migration continuation."""
    params = {"do_remote_prefill": True, "do_remote_decode": False, "remote_engine_id": "e", "remote_block_ids": [1],
              "remote_host": "10.0.0.1", "remote_port": 5600, "remote_request_id": "r-1", "tp_size": 1}
    out: list[tuple[str, str, Any]] = []
    for body, kind in ((COMPLETION, "CompletionRequest"), (CHAT, "ChatCompletionRequest"),
                       ({**COMPLETION, **STREAM}, "CompletionRequest"), ({**CHAT, **STREAM}, "ChatCompletionRequest")):
        out.append(("router prefill request", kind, pd.prefill_request(body)))
        out.append(("router decode request", kind, pd.decode_request(body, params)))
        out.append(("router continuation", "CompletionRequest", pd.continuation_request(body, [11, 12, 13], [14, 15])))
    return out


# Found by this test (fixed): the mock's chat message carried 0.11's `reasoning_content` for
# every version; 0.33's ChatMessage names it `reasoning` (vllm_emulation.chat_reasoning_field).
KNOWN: dict[str, pytest.MarkDecorator] = {}


@pytest.mark.parametrize("version", [pytest.param(v, marks=KNOWN[v]) if v in KNOWN else v for v in sorted(VERSIONS)])
async def test_responses_parse_with_vllm_protocol_models(version: str, counts: Counts) -> None:
    with pd_pair(version) as (p, d):
        cfg = router_config(prefill=[p.url], decode=[d.url], routing=RoutingSpec(policy="round_robin"))
        async with run_router(cfg) as router:
            items = await _collect(router.session, router.url, "router")
            items += await _collect(router.session, d.url, "mock")
    items += _worker_requests()
    answer = run_probe(version, "protocol.py", {"items": [{"model": m, "body": b} for _, m, b in items]})
    problems = []
    for (where, model, body), res in zip(items, answer["results"], strict=True):
        if res["error"]:
            problems.append(f"{where}: vLLM {version} {model} refused it: {res['error']}\n  {body}")
        elif res["extra"]:
            problems.append(f"{where}: fields vLLM {version}'s {model} does not have: {res['extra']}")
    counts.add("responses, SSE chunks, errors and worker requests validated by vLLM's protocol models", version,
               len(items), len(problems))
    assert not problems, f"{len(problems)} of {len(items)}:\n" + "\n".join(problems)
