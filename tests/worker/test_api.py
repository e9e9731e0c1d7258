"""OpenAI / vLLM HTTP contract of a real `pdserve worker` process."""

from __future__ import annotations

import json

import httpx
import pytest

from pdserve.worker.testing import WorkerHandle


def sse_events(text: str) -> list[str]:
    """Split an SSE body into its `data:` payloads, checking the framing strictly."""
    assert text.endswith("\n\n")
    frames = text.split("\n\n")[:-1]
    out = []
    for f in frames:
        assert f.startswith("data: "), f
        out.append(f[len("data: "):])
    return out


def test_models_health_ping_version_load(worker: WorkerHandle) -> None:
    r = httpx.get(f"{worker.url}/v1/models")
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "list"
    assert [m["id"] for m in body["data"]] == ["llama", "llama-alias"]
    m = body["data"][0]
    assert m["object"] == "model" and m["owned_by"] == "vllm" and m["max_model_len"] == 4096
    assert m["root"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert httpx.get(f"{worker.url}/health").status_code == 200
    assert httpx.get(f"{worker.url}/ping").status_code == 200
    assert httpx.get(f"{worker.url}/version").json()["version"].startswith("0.")
    assert httpx.get(f"{worker.url}/load").json() == {"server_load": 0}


def test_completion_shape_and_determinism(worker: WorkerHandle) -> None:
    req = {"model": "llama", "prompt": "The quick brown fox", "max_tokens": 8, "ignore_eos": True}
    r = httpx.post(f"{worker.url}/v1/completions", json=req)
    assert r.status_code == 200, r.text
    b = r.json()
    assert b["id"].startswith("cmpl-") and b["object"] == "text_completion" and b["model"] == "llama"
    assert isinstance(b["created"], int)
    (c,) = b["choices"]
    assert set(c) >= {"index", "text", "logprobs", "finish_reason", "stop_reason"}
    assert c["finish_reason"] == "length" and c["stop_reason"] is None and len(c["text"].split()) == 8
    assert b["usage"] == {"prompt_tokens": 4, "total_tokens": 12, "completion_tokens": 8, "prompt_tokens_details": None}
    assert b["kv_transfer_params"] is None
    # same prompt, same output (seeded by the prompt); explicit seed changes it
    assert httpx.post(f"{worker.url}/v1/completions", json=req).json()["choices"][0]["text"] == c["text"]
    other = httpx.post(f"{worker.url}/v1/completions", json={**req, "seed": 12345}).json()["choices"][0]["text"]
    assert other != c["text"]


def test_token_id_prompt_and_alias_model(worker: WorkerHandle) -> None:
    r = httpx.post(f"{worker.url}/v1/completions", json={"model": "llama-alias", "prompt": [5, 6, 7], "max_tokens": 2})
    assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == 3


def test_chat_completion_shape(worker: WorkerHandle) -> None:
    r = httpx.post(f"{worker.url}/v1/chat/completions", json={
        "model": "llama", "messages": [{"role": "user", "content": "Hello"}], "max_completion_tokens": 5,
        "ignore_eos": True})
    assert r.status_code == 200, r.text
    b = r.json()
    assert b["id"].startswith("chatcmpl-") and b["object"] == "chat.completion"
    msg = b["choices"][0]["message"]
    assert msg["role"] == "assistant" and len(msg["content"].split()) == 5 and msg["tool_calls"] == []
    assert b["choices"][0]["finish_reason"] == "length"
    assert b["usage"]["completion_tokens"] == 5 and b["usage"]["prompt_tokens"] > 1


def test_completion_stream_with_usage(worker: WorkerHandle) -> None:
    r = httpx.post(f"{worker.url}/v1/completions", json={
        "model": "llama", "prompt": "stream me", "max_tokens": 6, "ignore_eos": True, "stream": True,
        "stream_options": {"include_usage": True}})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    usage = chunks[-1]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 6
    toks = chunks[:-1]
    assert len(toks) == 6 and all(c["object"] == "text_completion" for c in toks)
    assert [c["choices"][0]["finish_reason"] for c in toks] == [None] * 5 + ["length"]
    assert len({c["id"] for c in chunks}) == 1


def test_chat_stream_without_usage(worker: WorkerHandle) -> None:
    r = httpx.post(f"{worker.url}/v1/chat/completions", json={
        "model": "llama", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "ignore_eos": True,
        "stream": True})
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(c["object"] == "chat.completion.chunk" and "usage" not in c for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[1:]).strip()


def test_stop_string_and_min_tokens(worker: WorkerHandle) -> None:
    base = {"model": "llama", "prompt": "count words", "max_tokens": 40, "ignore_eos": True, "seed": 1}
    full = httpx.post(f"{worker.url}/v1/completions", json=base).json()["choices"][0]["text"]
    words = full.split()
    stop = " " + words[3]
    cut = full.index(stop)
    r = httpx.post(f"{worker.url}/v1/completions", json={**base, "stop": [stop]}).json()
    assert r["choices"][0]["text"] == full[:cut]
    assert r["choices"][0]["finish_reason"] == "stop" and r["choices"][0]["stop_reason"] == stop
    # streaming applies the same stop rule
    r = httpx.post(f"{worker.url}/v1/completions", json={**base, "stop": stop, "stream": True})
    chunks = [json.loads(e) for e in sse_events(r.text)[:-1]]
    assert "".join(c["choices"][0]["text"] for c in chunks) == full[:cut]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_eos_honoured_unless_ignored(worker: WorkerHandle) -> None:
    # Without ignore_eos the mock model stops at its natural length (mean 24 tokens here): with max_tokens
    # large, some of 10 different prompts must end with finish_reason "stop" before max_tokens.
    reasons = set()
    for i in range(10):
        b = httpx.post(f"{worker.url}/v1/completions", json={
            "model": "llama", "prompt": f"prompt {i}", "max_tokens": 3000, "min_tokens": 2}).json()
        c = b["choices"][0]
        reasons.add(c["finish_reason"])
        assert b["usage"]["completion_tokens"] >= 2
        if c["finish_reason"] == "stop":
            assert b["usage"]["completion_tokens"] < 3000
    assert "stop" in reasons


@pytest.mark.parametrize(
    ("body", "status", "param", "fragment"),
    [
        ({"model": "nope", "prompt": "x"}, 404, "model", "does not exist"),
        ({"model": "llama", "prompt": "x", "max_tokens": -1}, 400, "max_tokens", "at least 1"),
        ({"model": "llama", "prompt": "x", "max_tokens": 0}, 400, "max_tokens", "at least 1"),
        ({"model": "llama", "prompt": "x", "max_tokens": 10**9}, 400, "max_tokens", "too large"),
        ({"model": "llama", "prompt": "x", "max_tokens": "lots"}, 400, "max_tokens", "integer"),
        ({"model": "llama", "prompt": 42}, 400, "prompt", ""),
        ({"model": "llama"}, 400, "prompt", "Field required"),
        ({"model": "llama", "prompt": "x", "n": 2}, 400, "n", "n=1"),
        ({"model": "llama", "prompt": "x", "temperature": -1}, 400, "temperature", ""),
        ({"model": "llama", "prompt": "x", "min_tokens": 5, "max_tokens": 2}, 400, "min_tokens", "min_tokens"),
        ({"model": "llama", "prompt": "word " * 5000}, 400, "prompt", "maximum context length"),
        ({"model": "llama", "prompt": ""}, 400, "prompt", "empty"),
        ([1, 2, 3], 400, None, "JSON object"),
    ],
)
def test_bad_requests(worker: WorkerHandle, body: object, status: int, param: str | None, fragment: str) -> None:
    r = httpx.post(f"{worker.url}/v1/completions", json=body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["code"] == status and err["param"] == param and fragment in err["message"]
    assert err["type"] == ("NotFoundError" if status == 404 else "BadRequestError")


def test_chat_bad_messages(worker: WorkerHandle) -> None:
    r = httpx.post(f"{worker.url}/v1/chat/completions", json={"model": "llama", "messages": []})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages"
    r = httpx.post(f"{worker.url}/v1/chat/completions", json={"model": "llama", "messages": [{"content": "x"}]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages"


def test_malformed_json_and_oversized_body_then_still_serving(worker: WorkerHandle) -> None:
    r = httpx.post(f"{worker.url}/v1/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "malformed JSON" in r.json()["error"]["message"]
    r = httpx.post(f"{worker.url}/v1/completions", json={"model": "llama", "prompt": "x" * 70_000})
    assert r.status_code == 413 and r.json()["error"]["code"] == 413
    ok = httpx.post(f"{worker.url}/v1/completions", json={"model": "llama", "prompt": "still alive", "max_tokens": 1})
    assert ok.status_code == 200


def test_client_disconnect_aborts_request(worker: WorkerHandle) -> None:
    with httpx.stream("POST", f"{worker.url}/v1/completions", json={
            "model": "llama", "prompt": "long one", "max_tokens": 2000, "ignore_eos": True, "stream": True}) as r:
        for _ in r.iter_lines():
            break  # read one line, then hang up
    for _ in range(100):
        if httpx.get(f"{worker.url}/load").json()["server_load"] == 0:
            break
        import time

        time.sleep(0.05)
    assert httpx.get(f"{worker.url}/load").json()["server_load"] == 0
    metrics = httpx.get(f"{worker.url}/metrics").text
    assert 'vllm:request_success_total{engine="0",finished_reason="abort",model_name="llama"}' in metrics


def test_stop_token_ids_report_the_token(worker: WorkerHandle) -> None:
    base = {"model": "llama", "prompt": "pick a token", "max_tokens": 30, "ignore_eos": True, "seed": 7}
    toks = httpx.post(f"{worker.url}/v1/completions", json={**base, "prompt": [11, 12, 13]}).json()
    assert toks["usage"]["completion_tokens"] == 30
    from pdserve.tokenization import mock as tokenizer

    text = toks["choices"][0]["text"]
    ids = tokenizer.encode(text)
    stop_id = ids[5]
    r = httpx.post(f"{worker.url}/v1/completions", json={**base, "prompt": [11, 12, 13], "stop_token_ids": [stop_id]})
    c = r.json()["choices"][0]
    assert c["finish_reason"] == "stop" and c["stop_reason"] == stop_id
    assert r.json()["usage"]["completion_tokens"] == ids.index(stop_id) + 1
