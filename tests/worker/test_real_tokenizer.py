"""A worker serving a real tokenizer (a byte-level BPE ``tokenizer.json`` + Llama-3 chat
template built here with the ``tokenizers`` library): vLLM's ``--tokenizer`` contract."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import msgpack
import pytest
import zmq

from pdserve.tokenization import ModelTokenizer, load_tokenizer
from pdserve.tokenization.testing import build_bpe_tokenizer
from pdserve.worker.testing import WorkerHandle, start_worker

TEXT = "Explain how the prefill worker hands the KV cache to the decode worker, please. " * 4


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_bpe_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.fixture(scope="module")
def tok(tok_dir: Path) -> ModelTokenizer:
    return load_tokenizer(str(tok_dir), "auto")


@pytest.fixture(scope="module")
def events() -> Iterator[tuple[zmq.Socket[bytes], str]]:
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    port = sub.bind_to_random_port("tcp://127.0.0.1")
    try:
        yield sub, f"tcp://127.0.0.1:{port}"
    finally:
        sub.close(0)
        ctx.term()


@pytest.fixture(scope="module")
def worker(tok_dir: Path, events: tuple[zmq.Socket[bytes], str]) -> Iterator[WorkerHandle]:
    cfg = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": events[1]}
    with start_worker("my-model", speedup=20.0, tokenizer=str(tok_dir),
                      args=["--max-model-len", "4096", "--kv-events-config", json.dumps(cfg)]) as w:
        end = time.monotonic() + 0.5
        while time.monotonic() < end:  # let the PUB connect and see our subscription
            events[0].poll(20)
        yield w


def test_prompt_tokens_are_the_models(worker: WorkerHandle, tok: ModelTokenizer) -> None:
    r = httpx.post(f"{worker.url}/v1/completions", json={"prompt": TEXT, "max_tokens": 4, "ignore_eos": True})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] == len(tok.encode(TEXT))  # BOS included, as vLLM adds it
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": TEXT}]
    c = httpx.post(f"{worker.url}/v1/chat/completions", json={"messages": msgs, "max_tokens": 4})
    assert c.status_code == 200, c.text
    assert c.json()["usage"]["prompt_tokens"] == len(tok.chat_ids(msgs, add_generation_prompt=True))


def test_generated_text_is_made_of_the_models_tokens(worker: WorkerHandle, tok: ModelTokenizer) -> None:
    r = httpx.post(f"{worker.url}/v1/completions", json={"prompt": "Say", "max_tokens": 12, "ignore_eos": True})
    text = r.json()["choices"][0]["text"]
    assert text.strip() and tok.decode(tok.encode(text, add_special_tokens=False)) == text


def test_out_of_vocabulary_ids_are_refused(worker: WorkerHandle, tok: ModelTokenizer) -> None:
    ok = httpx.post(f"{worker.url}/v1/completions", json={"prompt": [1, tok.vocab_size - 1], "max_tokens": 1})
    assert ok.status_code == 200, ok.text
    r = httpx.post(f"{worker.url}/v1/completions", json={"prompt": [1, tok.vocab_size], "max_tokens": 1})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == f"Token id {tok.vocab_size} is out of vocabulary"


def test_kv_events_carry_the_models_token_ids(worker: WorkerHandle, tok: ModelTokenizer,
                                              events: tuple[zmq.Socket[bytes], str]) -> None:
    sub = events[0]
    while sub.poll(50):
        sub.recv_multipart()  # earlier tests' events
    prompt = "A long shared document about river city music and the paper signal. " * 6
    ids = tok.encode(prompt)
    r = httpx.post(f"{worker.url}/v1/completions", json={"prompt": prompt, "max_tokens": 1})
    assert r.status_code == 200
    stored: list[int] = []
    end = time.monotonic() + 5
    while time.monotonic() < end and len(stored) < len(ids) // 16 * 16:
        if sub.poll(100):
            for ev in msgpack.unpackb(sub.recv_multipart()[2])[1]:
                if ev["type"] == "BlockStored":
                    stored += ev["token_ids"]
    assert stored[: len(ids) // 16 * 16] == ids[: len(ids) // 16 * 16]


def test_mistral_tokenizer_mode() -> None:
    """``--tokenizer-mode mistral`` with the Tekken tokenizer mistral-common ships."""
    from pdserve.tokenization.testing import shipped_mistral_tokenizer

    path = str(shipped_mistral_tokenizer("tekken"))
    tok = load_tokenizer(path, "mistral")
    msgs = [{"role": "user", "content": TEXT}]
    with start_worker("mistral-model", speedup=20.0, tokenizer=path, tokenizer_mode="mistral") as w:
        c = httpx.post(f"{w.url}/v1/chat/completions", json={"messages": msgs, "max_tokens": 3})
        assert c.status_code == 200, c.text
        assert c.json()["usage"]["prompt_tokens"] == len(tok.chat_ids(msgs, add_generation_prompt=True))
        r = httpx.post(f"{w.url}/v1/completions", json={"prompt": TEXT, "max_tokens": 3})
        assert r.json()["usage"]["prompt_tokens"] == len(tok.encode(TEXT))
        oov = httpx.post(f"{w.url}/v1/completions", json={"prompt": [tok.vocab_size], "max_tokens": 1})
        assert oov.status_code == 400 and "out of vocabulary" in oov.json()["error"]["message"]
        # vLLM renders a chat's tools into the prompt, as the router does when it hashes the prompt's blocks.
        tools = [{"type": "function", "function": {
            "name": "get_weather", "description": "Current weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
        with_tools = len(tok.chat_ids(msgs, add_generation_prompt=True, tools=tools))
        assert with_tools > len(tok.chat_ids(msgs, add_generation_prompt=True))
        t = httpx.post(f"{w.url}/v1/chat/completions", json={"messages": msgs, "tools": tools, "max_tokens": 3})
        assert t.status_code == 200, t.text
        assert t.json()["usage"]["prompt_tokens"] == with_tools
