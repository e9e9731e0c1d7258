"""Issue 11's done-when checks: a real tokenizer (a byte-level BPE built here with the
``tokenizers`` library, Llama 3 chat template) in the router and in two mock workers
that hash blocks with vLLM's default algorithm and seed rule (the mock's defaults),
over real HTTP on loopback.

- kv_aware sends a repeated long prefix, chat and completion, to the worker that
  holds it, and that worker's own ``vllm:prefix_cache_hits`` counts the hit;
- a decode worker SIGKILLed mid-stream: the stream completes on the other worker,
  which accepted the continuation's token ids (it refuses out-of-vocabulary ids with
  vLLM's 400, so an id the model does not know would end the stream in an error).
"""

from __future__ import annotations

import json
from contextlib import ExitStack

import pytest

from pdserve.router.core.spec import RoutingSpec
from pdserve.tokenization import load_tokenizer
from pdserve.tokenization.testing import build_bpe_tokenizer
from tests.router.conftest import (
    MODEL,
    entry,
    kill,
    kv_events_flowing,
    read_sse,
    router_config,
    run_router,
    stream_text,
    wait_for,
    worker_args,
    worker_metric,
)
from tests.router.test_resilience import _reparse, _stream_until_tokens

SYSTEM = ("You are the operations assistant of a Kubernetes cluster that serves large language models "
          "with separate prefill and decode pools. Explain each answer step by step, name the metric "
          "you used, and keep a friendly tone. ")


@pytest.fixture(scope="module")
def bpe(tmp_path_factory):
    return build_bpe_tokenizer(tmp_path_factory.mktemp("bpe"))


def start(stack: ExitStack, bpe, n: int, speedup: float, events: bool) -> list:
    from pdserve.worker.testing import start_worker

    return [stack.enter_context(start_worker(MODEL, args=worker_args(pd=False, events=events), speedup=speedup,
                                             tokenizer=str(bpe))) for _ in range(n)]


def _decode_url(resp) -> str:
    return resp.headers["x-pdserve-route"].split("decode=")[1].split(" ")[0]


def _overlap(resp) -> int:
    return int(resp.headers["x-pdserve-route"].split("overlap_blocks=")[1].split(";")[0])


async def test_kv_aware_sends_a_repeated_prefix_to_its_holder_with_a_real_tokenizer(bpe, tmp_path) -> None:
    tok = load_tokenizer(str(bpe))
    with ExitStack() as stack:
        workers = start(stack, bpe, 2, speedup=100.0, events=True)
        path = tmp_path / "workers.json"
        path.write_text(json.dumps({"decode": [entry(w) for w in workers]}))
        cfg = router_config(discovery_file=path, routing=RoutingSpec(policy="kv_aware", block_size=16), kv_events=True,
                            tokenizer=str(bpe), tokenizer_mode="auto")
        async with run_router(cfg) as r:
            await kv_events_flowing(r, workers)
            q1, q2 = "What is the first question?", "And the second one?"
            cases = []
            for i in range(3):  # three distinct long prefixes, each asked twice, chat and completion
                doc = f"Document {i}: " + (SYSTEM + f"Section {i} covers topic {i * 7}. ") * 6

                def chat(q: str, doc: str = doc) -> dict:
                    return {"model": MODEL, "max_tokens": 2,
                            "messages": [{"role": "system", "content": doc}, {"role": "user", "content": q}]}

                def cmpl(q: str, doc: str = doc) -> dict:
                    return {"model": MODEL, "max_tokens": 2, "prompt": doc + q}

                cases.append(("/v1/chat/completions", chat, lambda b: tok.chat_ids(b["messages"])))
                cases.append(("/v1/completions", cmpl, lambda b: tok.encode(b["prompt"])))
            for path_, body, ids_of in cases:
                a, b = ids_of(body(q1)), ids_of(body(q2))
                assert all(0 <= t < tok.vocab_size for t in a + b)
                common = next((n for n, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
                want = common // 16  # full blocks both prompts share
                assert want >= 10
                first = await r.post(path_, body(q1))
                assert first.status == 200, await first.text()
                await first.read()
                holder = _decode_url(first)
                # This prompt's own blocks (a count of the holder's blocks is met by earlier cases').
                keys = r.state.index.request_keys(a)
                await wait_for(lambda h=holder, k=keys, w=want: r.state.index.overlaps(k).get(h, 0) >= w,
                               what="the holder's KV events to reach the index")
                hits_before = await worker_metric(holder, "vllm:prefix_cache_hits_total")
                again = await r.post(path_, body(q2))
                assert again.status == 200, await again.text()
                await again.read()
                assert _decode_url(again) == holder, again.headers["x-pdserve-route"]
                assert _overlap(again) == want
                assert await worker_metric(holder, "vllm:prefix_cache_hits_total") - hits_before >= want * 16
            hits = sum([await worker_metric(w.url, "vllm:prefix_cache_hits_total") for w in workers])
            queries = sum([await worker_metric(w.url, "vllm:prefix_cache_queries_total") for w in workers])
            assert queries > 0 and hits / queries > 0


@pytest.mark.parametrize("kind", ["completions", "chat"])
async def test_migration_after_sigkill_continues_with_in_vocabulary_ids(bpe, kind) -> None:
    tok = load_tokenizer(str(bpe))
    with ExitStack() as stack:
        workers = start(stack, bpe, 2, speedup=1.0, events=False)
        cfg = router_config(decode=[w.url for w in workers], routing=RoutingSpec(policy="round_robin"),
                            scrape_interval_s=60, tokenizer=str(bpe), tokenizer_mode="auto")
        async with run_router(cfg) as r:
            body: dict = {"model": MODEL, "max_tokens": 60, "ignore_eos": True, "stream": True,
                          "stream_options": {"include_usage": True}}
            if kind == "chat":
                body["messages"] = [{"role": "user", "content": "Tell me a long story about a river city."}]
            else:
                body["prompt"] = "Tell me a long story about a river city. " * 5
            resp = await r.post("/v1/chat/completions" if kind == "chat" else "/v1/completions", body)
            assert resp.status == 200
            victim = next(w for w in workers if w.url == _decode_url(resp))
            survivor = next(w for w in workers if w is not victim)
            first, _ = await _stream_until_tokens(resp, 10)
            kill(victim)
            events = await _reparse(first) + await read_sse(resp)
            assert events[-1] == "[DONE]"
            assert not any(isinstance(e, dict) and "error" in e for e in events), events
            text = stream_text(events, kind)
            assert text and all(0 <= t < tok.vocab_size for t in tok.encode(text, add_special_tokens=False))
            assert await r.metric("pdserve_router_migrations_total") == 1
            # The survivor accepted the continuation (prompt ids + generated ids) and generated the rest.
            assert await worker_metric(survivor.url, "vllm:request_success_total") >= 1
            assert await worker_metric(survivor.url, "vllm:generation_tokens_total") > 0


async def test_an_out_of_vocabulary_token_prompt_gets_the_workers_400(bpe) -> None:
    tok = load_tokenizer(str(bpe))
    with ExitStack() as stack:
        (w,) = start(stack, bpe, 1, speedup=100.0, events=False)
        cfg = router_config(decode=[w.url], tokenizer=str(bpe), tokenizer_mode="auto")
        async with run_router(cfg) as r:
            resp = await r.post("/v1/completions", {"model": MODEL, "prompt": [1, 2, tok.vocab_size + 7],
                                                     "max_tokens": 1})
            assert resp.status == 400
            assert (await resp.json())["error"]["message"] == f"Token id {tok.vocab_size + 7} is out of vocabulary"
