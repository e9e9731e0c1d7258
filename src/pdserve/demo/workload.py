"""The demo's workload: a public trace squeezed into the demo's duration (pure).

The hour of trace is compressed into ``duration_s`` and thinned to ``mean_rate``
requests/s with a low-discrepancy rule, which keeps the trace's load shape (its
rises and falls) while the absolute rate fits one machine. Token counts are scaled
by ``token_scale`` and capped, so a burst cannot swamp the mock workers' CPU.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from pdserve.tokenization import mock as tokenizer
from pdserve.sim.traces import Trace, load_trace

# Fractional part of the golden ratio: index * PHI mod 1 spreads evenly over [0, 1),
# so "keep if below p" keeps a fraction p of every stretch of the trace.
_PHI = 0.6180339887498949
# A system prompt every request shares, as chat applications do: it gives the prefix
# cache (and the router's prefix-aware scoring) something real to reuse.
SYSTEM_PROMPT_WORDS = 64


def default_trace_path() -> Path:
    return Path(str(resources.files("pdserve.demo").joinpath("data/azure_conv_every5th.csv")))


@dataclass(frozen=True, slots=True)
class WorkloadConfig:
    duration_s: float = 120.0
    mean_rate: float = 3.0
    token_scale: float = 0.25
    max_prompt_tokens: int = 1024
    max_output_tokens: int = 96
    min_output_tokens: int = 4
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.duration_s > 0:
            raise ValueError(f"duration must be positive, got {self.duration_s}")
        if not self.mean_rate > 0:
            raise ValueError(f"rate must be positive, got {self.mean_rate}")
        if not 0 < self.token_scale <= 1:
            raise ValueError(f"token scale must be in (0, 1], got {self.token_scale}")
        if self.max_prompt_tokens < SYSTEM_PROMPT_WORDS + 1:
            raise ValueError(f"max prompt tokens must exceed the {SYSTEM_PROMPT_WORDS}-token system prompt")
        if not 1 <= self.min_output_tokens <= self.max_output_tokens:
            raise ValueError("need 1 <= min output tokens <= max output tokens")


@dataclass(frozen=True, slots=True)
class DemoRequest:
    index: int  # position in the trace
    send_at_s: float  # seconds after the replay starts
    prompt: str
    prompt_tokens: int
    max_tokens: int


def _words(rng: random.Random, n: int) -> str:
    return tokenizer.decode(rng.choice(tokenizer.WORD_IDS) for _ in range(n))


def system_prompt() -> str:
    return _words(random.Random(0x5D5), SYSTEM_PROMPT_WORDS)


def build(trace: Trace, config: WorkloadConfig) -> list[DemoRequest]:
    if not trace.requests or trace.duration_s <= 0:
        raise ValueError(f"trace {trace.source} needs at least two requests at different times")
    squeeze = config.duration_s / trace.duration_s
    keep = min(1.0, config.mean_rate * config.duration_s / len(trace.requests))
    shared = system_prompt()
    out: list[DemoRequest] = []
    for req in trace.requests:
        if (req.index * _PHI) % 1.0 >= keep:
            continue
        rng = random.Random(config.seed * 1_000_003 + req.index)
        prompt_tokens = min(config.max_prompt_tokens, max(SYSTEM_PROMPT_WORDS + 1, round(req.input_tokens * config.token_scale)))
        max_tokens = min(config.max_output_tokens, max(config.min_output_tokens, round(req.output_tokens * config.token_scale)))
        prompt = shared + _words(rng, prompt_tokens - SYSTEM_PROMPT_WORDS)
        out.append(DemoRequest(req.index, req.arrival_s * squeeze, prompt, prompt_tokens, max_tokens))
    return out


def load(path: Path | None, config: WorkloadConfig) -> tuple[Trace, list[DemoRequest]]:
    trace = load_trace(path or default_trace_path())
    return trace, build(trace, config)
