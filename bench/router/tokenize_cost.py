"""What the model's tokenizer costs the router per request, and once at start-up.

    .venv/bin/python bench/router/tokenize_cost.py --out bench/router/results/tokenize_cost.json

Per prompt size, the router's front door (``requests.parse_request``: validation +
token ids) for a completion and a chat request, with each tokenizer mode the router
runs: ``mock`` (hash-word), ``auto`` on a byte-level BPE built with ``tokenizers``
(Llama 3 layout; through ``transformers``, as vLLM loads it) and ``mistral`` (the
Tekken tokenizer shipped in mistral-common); the raw ``tokenizers`` encode of the same
BPE shows what the ``transformers`` wrapper adds. Then the router's block keys
(blake2b-64 chain, ``block_hasher``) against vLLM-style sha256-over-CBOR chaining
(``pdserve.worker.vllm_hash`` with sha256_cbor and PYTHONHASHSEED=0, what the router computed before) for the same ids, both
without memo hits. Start-up: importing ``transformers`` in a fresh interpreter and
loading each tokenizer. Medians over ``--runs`` repetitions, with spread; record the
machine's load with the numbers (``meta``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from resultmeta import Run, spread, write_result  # noqa: E402

WORDS = ("the router keeps a prefix index of every worker and sends each request where its prompt is "
         "already cached so that prefill work is saved and time to first token drops").split()


def text_of(n_words: int) -> str:
    return " ".join(WORDS[i % len(WORDS)] + ("." if i % 13 == 12 else "") for i in range(n_words))


def _forget(tok: object) -> None:
    segments = getattr(tok, "_segments", None)
    if segments is not None:
        segments.clear()


def per_call(fn, min_time: float = 0.2) -> float:
    n, t0 = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        dt = time.perf_counter() - t0
        if dt >= min_time and n >= 3:
            return dt / n


def conversation_cost(tok, runs: int, parse_request, turns: int = 8, conversations: int = 50) -> dict:
    """A chat request per turn of ``conversations`` conversations of ``turns`` turns (a
    60-word system prompt, 60-word user turns, 40-word answers; every turn re-sends the
    history, as clients do), in turn order: ms per request through the router's front door
    with the piece cache (``tokenization/segments.py``) and with it cleared before each
    request (what every request cost before the cache)."""
    bodies = []
    for c in range(conversations):
        msgs = [{"role": "system", "content": f"conversation {c}. " + text_of(60)}]
        for t in range(turns):
            # Every message names its conversation: no piece is shared between conversations.
            msgs.append({"role": "user", "content": f"conversation {c}, turn {t}: " + text_of(60 + 7 * c % 11)})
            bodies.append(json.dumps({"model": "m", "messages": msgs}).encode())
            msgs = [*msgs, {"role": "assistant", "content": f"({c}.{t}) " + text_of(40 + t)}]
    bodies.sort(key=lambda b: json.loads(b)["messages"].__len__())  # all first turns, then all second...

    def each(forget: bool) -> float:
        _forget(tok)
        t0 = time.perf_counter()
        for body in bodies:
            if forget:
                _forget(tok)
            parse_request(body, "chat", tok)
        return (time.perf_counter() - t0) / len(bodies) * 1e3

    cached, cold = [], []
    for _ in range(runs):
        cold.append(each(True))
        cached.append(each(False))
    tokens = sum(len(parse_request(b, "chat", tok).prompt_ids) for b in bodies) / len(bodies)
    return {"turns": turns, "conversations": conversations, "mean_prompt_tokens": round(tokens),
            "chat_auto_bpe_cold_ms": spread(cold), "chat_auto_bpe_piece_cache_ms": spread(cached),
            "ratio_cached_to_cold": spread([a / b for a, b in zip(cached, cold)])}


def burst_prompt_cost(tok, runs: int, parse_request, streams: int = 256, words: int = 64) -> dict:
    """The burst benchmark's chat requests (``burst_client.prompts_for``) through the router's
    front door, µs per request: a batch of new prompts (numbered on, as every burst's are),
    then the same batch again. The piece cache holds each whole user message, so a repeat
    skips the BPE: a loop over the same prompts measures the cache, not a burst's cost."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from burst_client import prompts_for, request_body

    def bodies(offset: int) -> list[bytes]:
        return [request_body("chat", "mock-llama", p, 32) for p in prompts_for(streams, offset, words)]

    def each(batch: list[bytes]) -> float:
        t0 = time.perf_counter()
        for body in batch:
            parse_request(body, "chat", tok)
        return (time.perf_counter() - t0) / len(batch) * 1e6

    each(bodies(0))  # warm: the template, the shared filler's words
    fresh, repeated = [], []
    for r in range(runs):
        batch = bodies((r + 1) * streams)
        fresh.append(each(batch))
        repeated.append(each(batch))
    return {"streams": streams, "prompt_words": words, "fresh_us": spread(fresh), "repeated_us": spread(repeated),
            "ratio_fresh_to_repeated": spread([a / b for a, b in zip(fresh, repeated)])}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("bench/router/results/tokenize_cost.json"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--words", type=int, nargs="+", default=[200, 1500, 6000])
    args = ap.parse_args(argv)
    run = Run(runs=args.runs)

    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import transformers"], check=True, capture_output=True)
    import_s = time.perf_counter() - t0

    from pdserve.worker.vllm_hash import BlockHasher as VllmBlockHasher
    from pdserve.router.core.block_hasher import BlockHasher
    from pdserve.router.core.requests import parse_request
    from pdserve.tokenization import load_tokenizer
    from pdserve.tokenization.testing import build_bpe_tokenizer, shipped_mistral_tokenizer

    cbor_chain = VllmBlockHasher("sha256_cbor", "0.33.0", "0")  # what pdserve.common.hashing computed
    toks, load_s = {}, {}
    with tempfile.TemporaryDirectory(prefix="pdserve-bpe-") as tmp:  # each tokenizer loads into memory
        bpe_dir = build_bpe_tokenizer(tmp)
        sources = {"mock": ("", "mock"), "auto_bpe": (str(bpe_dir), "auto"),
                   "mistral_tekken": (str(shipped_mistral_tokenizer("tekken")), "mistral")}
        for name, (src, mode) in sources.items():
            t0 = time.perf_counter()
            toks[name] = load_tokenizer(src, mode)
            load_s[name] = time.perf_counter() - t0
    raw_bpe = toks["auto_bpe"].hf.backend_tokenizer  # the Rust tokenizer transformers wraps

    rows = []
    for n_words in args.words:
        text = text_of(n_words)
        cmpl = json.dumps({"model": "m", "prompt": text, "max_tokens": 1}).encode()
        chat = json.dumps({"model": "m", "messages": [{"role": "system", "content": "Be brief."},
                                                       {"role": "user", "content": text}]}).encode()
        row: dict = {"words": n_words, "tokens": {k: len(t.encode(text)) for k, t in toks.items()}}
        samples: dict[str, list[float]] = {}
        for _ in range(args.runs):
            for name, tok in toks.items():
                samples.setdefault(f"completion_{name}_ms", []).append(
                    per_call(lambda tok=tok, body=cmpl: parse_request(body, "completions", tok)) * 1e3)
                # Cold: the piece cache (tokenization/segments.py) forgets the prompt each call.
                samples.setdefault(f"chat_{name}_ms", []).append(
                    per_call(lambda tok=tok, body=chat: (_forget(tok), parse_request(body, "chat", tok))) * 1e3)
            samples.setdefault("raw_tokenizers_encode_bpe_ms", []).append(per_call(lambda text=text: raw_bpe.encode(text)) * 1e3)
            ids = toks["auto_bpe"].encode(text)
            samples.setdefault("router_block_keys_ms", []).append(
                per_call(lambda ids=ids: BlockHasher(16).request_keys(ids)) * 1e3)
            samples.setdefault("vllm_sha256_cbor_chain_ms", []).append(
                per_call(lambda ids=ids: cbor_chain.block_hashes(ids, 16)) * 1e3)
        row.update({k: spread(v) for k, v in samples.items()})
        rows.append(row)
        print(n_words, {k: round(v["median"], 3) for k, v in row.items() if isinstance(v, dict) and "median" in v},
              flush=True)

    conversation = conversation_cost(toks["auto_bpe"], args.runs, parse_request)
    print("conversation", conversation, flush=True)
    burst_prompts = burst_prompt_cost(toks["auto_bpe"], args.runs, parse_request)
    print("burst prompts", burst_prompts, flush=True)
    doc = {"startup": {"import_transformers_s": round(import_s, 3),
                       "load_s": {k: round(v, 3) for k, v in load_s.items()}},
           "per_request": rows,
           "conversation": conversation,
           "burst_prompts": burst_prompts,
           "notes": "ms per call, median over runs; each run averages >= 0.2 s of calls; memo-free block keys"}
    write_result(args.out, doc, run)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
