"""A streaming OpenAI client for chaos tests: every call ends, and how it ended is classified.

What a client of a router that dies may see, and what counts as a *clean* error:
- ``completed``: ``[DONE]`` after exactly the tokens asked for (usage says so);
- ``error-event``: an OpenAI-style ``{"error": ...}`` SSE event (the openai SDK raises APIError on it);
- ``transport``: the connection is refused, reset or closed before the chunked body ended
  (httpx's ConnectError / ReadError / RemoteProtocolError; the SDK raises them too);
- ``http-5xx``: a JSON error answer before streaming began.
Not clean, and a test failure:
- ``truncated``: the body ended well-formed without ``[DONE]`` or with fewer tokens: a client
  cannot tell it from a short answer (silent wrong output);
- ``timeout``: only the client's own read timeout ended it: without one it would hang.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from pdserve.tokenization import mock as tokenizer

CLEAN_FAILURES = ("error-event", "transport", "http-5xx")


@dataclass(frozen=True)
class StreamResult:
    outcome: str  # completed | error-event | transport | http-5xx | http-4xx | truncated | timeout
    detail: str
    chunks: int  # content chunks received
    started: float  # time.monotonic()
    ended: float

    @property
    def clean(self) -> bool:
        return self.outcome == "completed" or self.outcome in CLEAN_FAILURES


def prompt(seed: int, words: int = 20) -> str:
    # Distinct random words per seed: prompts share no prefix, so prefill really works.
    rng = random.Random(seed)
    return tokenizer.decode(rng.choice(tokenizer.WORD_IDS) for _ in range(words))


def stream_completion(base_url: str, model: str, max_tokens: int, *, seed: int, read_timeout_s: float,
                      on_chunk: Callable[[int], None] | None = None, prompt_words: int = 20) -> StreamResult:
    """One streamed /v1/completions call; never raises, always returns how it ended."""
    body = {"model": model, "prompt": prompt(seed, prompt_words), "max_tokens": max_tokens, "stream": True,
            "stream_options": {"include_usage": True}, "ignore_eos": True}
    timeout = httpx.Timeout(connect=3.0, read=read_timeout_s, write=5.0, pool=5.0)
    started = time.monotonic()
    chunks, done, usage, error = 0, False, None, None

    def result(outcome: str, detail: str) -> StreamResult:
        return StreamResult(outcome, detail[:300], chunks, started, time.monotonic())

    try:
        with httpx.Client(timeout=timeout) as client, client.stream("POST", f"{base_url}/v1/completions", json=body) as r:
            if r.status_code != 200:
                r.read()
                return result(f"http-{r.status_code // 100}xx", f"HTTP {r.status_code}: {r.text[:200]}")
            for line in r.iter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[len("data: "):]
                if data == "[DONE]":
                    done = True
                    continue
                event = json.loads(data)
                if event.get("error"):
                    error = event["error"]
                elif event.get("choices"):
                    chunks += 1
                    if on_chunk is not None:
                        on_chunk(chunks)
                if event.get("usage"):
                    usage = event["usage"].get("completion_tokens")
    except httpx.TimeoutException as e:
        return result("timeout", f"{type(e).__name__}: {e}")
    except httpx.TransportError as e:
        return result("transport", f"{type(e).__name__}: {e}")
    if error is not None:
        return result("error-event", str(error.get("message", error)))
    if done and usage == max_tokens:
        return result("completed", "")
    return result("truncated", f"done={done} usage={usage} chunks={chunks} of {max_tokens} tokens")


@dataclass
class Tally:
    """Requests sent / completed / failed, with every result kept for the report."""

    results: list[StreamResult] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, r: StreamResult) -> None:
        with self.lock:
            self.results.append(r)

    @property
    def sent(self) -> int:
        return len(self.results)

    @property
    def completed(self) -> int:
        return sum(r.outcome == "completed" for r in self.results)

    @property
    def failed(self) -> list[StreamResult]:
        return [r for r in self.results if r.outcome != "completed"]

    def by_outcome(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.results:
            out[r.outcome] = out.get(r.outcome, 0) + 1
        return out

    def summary(self, what: str) -> str:
        return f"{what}: sent={self.sent} completed={self.completed} failed={len(self.failed)} {self.by_outcome()}"
