"""Prompt token ids: the router's and the mock worker's, for completion and chat requests, equal
what vLLM's own OpenAI front end computes for the same tokenizer, per supported version.

Tokenizer: a real byte-level BPE ``tokenizer.json`` with Llama 3's chat template built
locally (``pdserve.tokenization.testing``). Judge: 0.11 ``vllm/transformers_utils/
tokenizer.py`` + ``OpenAIServing._preprocess_chat`` (``vllm/entrypoints/chat_utils.py``) and
``CompletionRenderer``; 0.33 ``vllm/renderers/online_renderer.py`` ``OnlineRenderer``.
The router's ids come from its request parser; the mock's from a running worker: its usage
count and the token ids of the blocks it reports in its KV events.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import msgpack
import pytest

from pdserve.api.vllm_versions import VERSIONS
from pdserve.router.core.errors import RequestError
from pdserve.router.core.requests import parse_request
from pdserve.tokenization import load_tokenizer
from pdserve.worker.testing import kv_event_subscriber, start_worker
from tests.conformance.conftest import Counts
from tests.conformance.fixtures import build_mistral_model_dir, build_model_dir
from tests.conformance.vllm_env import run_probe

BLOCK = 16
LONG = "Explain how the prefill and decode pools share the KV cache of a long prompt, step by step. "
CASES: list[tuple[str, dict[str, Any]]] = [
    ("completion", {"prompt": LONG * 3}),
    ("completion", {"prompt": LONG * 2, "add_special_tokens": False}),
    ("completion", {"prompt": "Ünïcödé ☃ text\n\twith tabs, digits 12345 and an emoji 🚀. " * 3}),
    ("completion", {"prompt": "A literal <|eot_id|> inside the text, then more words. " * 3}),
    ("chat", {"messages": [{"role": "system", "content": "You are brief."}, {"role": "user", "content": LONG * 2}]}),
    ("chat", {"messages": [{"role": "user", "content": LONG}, {"role": "assistant", "content": "Sure, here it is."},
                           {"role": "user", "content": "  And again, with trailing spaces.  " * 4}]}),
    ("chat", {"messages": [{"role": "user", "content": LONG * 2}], "add_generation_prompt": False}),
    ("chat", {"messages": [{"role": "user", "content": LONG * 2}, {"role": "assistant", "content": "The answer starts"}],
              "add_generation_prompt": False, "continue_final_message": True}),
    ("chat", {"messages": [{"role": "user", "content": [{"type": "text", "text": LONG}, {"type": "text", "text": LONG}]}]}),
]
# Chat with add_special_tokens=True: vLLM tokenizes the rendered template *with* special
# tokens, so a template that writes BOS gets a second one (Llama 3 templates do).
DOUBLE_BOS = [("chat", {"messages": [{"role": "user", "content": LONG * 2}], "add_special_tokens": True})]


def _body(kind: str, case: dict[str, Any]) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 1, **case} if kind == "completion" else {"model": "m", "max_completion_tokens": 1, **case}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model_dir(tmp_path_factory.mktemp("bpe-model"))


@pytest.fixture(scope="module")
def mistral_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_mistral_model_dir(tmp_path_factory.mktemp("mistral-model"))


def _mock_ids(model_dir: Path, bodies: list[tuple[str, dict[str, Any]]], mode: str = "auto", version: str | None = None
              ) -> list[tuple[int | None, set[tuple[int, ...]]]]:
    """Per request: the mock's prompt token count, and every full-block token sequence (root to
    block) its KV events reported so far."""
    events = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": "tcp://127.0.0.1:*"}
    args = ["--kv-events-config", json.dumps(events), "--block-size", str(BLOCK), "--served-model-name", "m"]
    if version is not None:  # the mock emulating the release it is compared with
        args += ["--mock-vllm-version", version]
    blocks: dict[int, tuple[int | None, tuple[int, ...]]] = {}
    out = []
    with start_worker("m", args=args, speedup=50.0, tokenizer=str(model_dir), tokenizer_mode=mode,
                      env={"PYTHONHASHSEED": "0"}) as w:
        assert w.kv_events_endpoint
        with kv_event_subscriber(w.kv_events_endpoint) as sub:
            for kind, body in bodies:
                path = "/v1/completions" if kind == "completion" else "/v1/chat/completions"
                r = httpx.post(w.url + path, json=body, timeout=30)
                if r.status_code == 400:  # refused (compared with vLLM's verdict by the caller)
                    out.append((None, set()))
                    continue
                assert r.status_code == 200, r.text
                while sub.poll(300):
                    for ev in msgpack.unpackb(sub.recv_multipart()[2])[1]:
                        ev = ev if isinstance(ev, dict) else dict(zip(("type", "block_hashes", "parent_block_hash", "token_ids"), ev))
                        if ev["type"] != "BlockStored":
                            continue
                        parent = ev["parent_block_hash"]
                        for i, h in enumerate(ev["block_hashes"]):
                            blocks[h] = (parent, tuple(ev["token_ids"][i * BLOCK:(i + 1) * BLOCK]))
                            parent = h
                out.append((r.json()["usage"]["prompt_tokens"], {_chain(blocks, h) for h in blocks}))
    return out


def _chain(blocks: dict[int, tuple[int | None, tuple[int, ...]]], h: int | None) -> tuple[int, ...]:
    seq: tuple[int, ...] = ()
    while h is not None and h in blocks:
        parent, toks = blocks[h]
        seq = toks + seq
        h = parent
    return seq


def _check(version: str, model_dir: Path, counts: Counts, cases: list[tuple[str, dict[str, Any]]],
           mode: str = "auto") -> None:
    bodies = [(kind, _body(kind, case)) for kind, case in cases]
    answer = run_probe(version, "tokens.py", {"model_dir": str(model_dir), "tokenizer_mode": mode,
                                              "cases": [{"kind": k, "body": b} for k, b in bodies]})
    # pdserve configured for the release vLLM's code is run from (router --vllm-version,
    # mock --mock-vllm-version), as the operator renders them from the resource.
    tok = load_tokenizer(str(model_dir), mode, vllm_version=version)
    mock = _mock_ids(model_dir, bodies, mode, version)
    problems = []
    for (kind, body), res, (n_mock, chains) in zip(bodies, answer["results"], mock, strict=True):
        raw = json.dumps(body).encode()
        kind_ = "chat" if kind == "chat" else "completion"
        if "error" in res:  # vLLM refuses the request: so must the router and the mock
            try:
                parse_request(raw, kind_, tok)
                problems.append(f"router accepted what vLLM {version} refuses ({res['error']}): {body}")
            except RequestError:
                pass
            if n_mock is not None:
                problems.append(f"mock accepted what vLLM {version} refuses ({res['error']}): {body}")
            continue
        want = res["ids"]
        if n_mock is None:
            problems.append(f"mock refused what vLLM {version} accepts: {body}")
            continue
        router = parse_request(raw, kind_, tok).prompt_ids
        if router != want:
            problems.append(f"router {kind} {body}:\n  vLLM   {want}\n  router {router}")
        full = tuple(want[: len(want) // BLOCK * BLOCK])
        if n_mock != len(want) or (full and full not in chains):
            problems.append(f"mock {kind} {body}: {n_mock} prompt tokens (vLLM {len(want)}), blocks match: {full in chains}")
    counts.add("prompt token ids (router and mock, completion and chat) equal vLLM's preprocessing", version,
               2 * len(bodies), len(problems))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_router_and_mock_token_ids_equal_vllms(version: str, model_dir: Path, counts: Counts) -> None:
    _check(version, model_dir, counts, CASES)


# Found by this test (fixed): the router and the mock gave one BOS where vLLM gives two for a
# chat with add_special_tokens=true (pdserve.tokenization.rules assumed 0.33 ignores it).
@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_chat_add_special_tokens_like_vllm(version: str, model_dir: Path, counts: Counts) -> None:
    _check(version, model_dir, counts, DOUBLE_BOS)


NO_SPECIAL = [c for c in CASES if c[0] == "completion" and c[1].get("add_special_tokens") is False]


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_mistral_tokenizer_ids_equal_vllms(version: str, mistral_dir: Path, counts: Counts) -> None:
    """--tokenizer-mode mistral with mistral-common's shipped Tekken tokenizer (a request vLLM
    refuses must be refused by the router and the mock too)."""
    _check(version, mistral_dir, counts, [c for c in CASES if c not in NO_SPECIAL] + DOUBLE_BOS, mode="mistral")


# Found by this test (fixed): vLLM 0.11's MistralTokenizer adds BOS to a completion prompt even
# with add_special_tokens=false (0.33 honours it); router and mock followed 0.33 for every version.
MISTRAL_KNOWN: dict[str, pytest.MarkDecorator] = {}


@pytest.mark.parametrize("version", [pytest.param(v, marks=MISTRAL_KNOWN[v]) if v in MISTRAL_KNOWN else v
                                     for v in sorted(VERSIONS)])
def test_mistral_completion_without_special_tokens(version: str, mistral_dir: Path, counts: Counts) -> None:
    _check(version, mistral_dir, counts, NO_SPECIAL, mode="mistral")
