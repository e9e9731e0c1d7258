"""Measure a capacity profile by sweeping a live OpenAI-compatible endpoint (mock or vLLM).

Prefill, per ISL: open-loop Poisson arrivals of ``max_tokens=1`` requests at rising
rates; each level records prompt-token throughput and mean / tail TTFT. A level stops
the ISL's sweep once the endpoint saturates (it completes < 90 % of what was offered)
or the tail TTFT passes ``max_latency_s``.

Decode, per context: closed loop with *n* concurrent streams (n doubling) of prompts
of that length generating ``decode_tokens`` each; records generated-token throughput and
mean / tail inter-token latency (first token excluded: it carries the prefill).

Prompts start with a random word so no two share a prefix (the profile must not be
flattered by prefix-cache hits); ISL is taken from the response's ``usage``.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import httpx
import numpy as np

from pdserve.planner.core.profile import PROFILE_VERSION, CapacityProfile


@dataclass
class SweepConfig:
    endpoint: str
    model: str | None = None  # default: the first of /v1/models
    isls: Sequence[int] = (128, 512, 2048)
    contexts: Sequence[int] = (128, 512, 2048)
    max_concurrency: int = 64
    level_duration_s: float = 6.0
    decode_tokens: int = 32
    max_latency_s: float = 10.0
    tail_quantile: float = 0.99
    seed: int = 0


def _prompt(rng: random.Random, n: int) -> str:
    return f"w{rng.randrange(10**9)} " + " ".join(f"t{rng.randrange(5000)}" for _ in range(max(0, n - 1)))


class Sweeper:
    def __init__(self, cfg: SweepConfig, progress: Callable[[str], None] = lambda s: None) -> None:
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.progress = progress
        self.client = httpx.AsyncClient(base_url=cfg.endpoint.rstrip("/"), timeout=cfg.max_latency_s * 3 + 30,
                                        limits=httpx.Limits(max_connections=cfg.max_concurrency * 2 + 16))

    async def model(self) -> str:
        if self.cfg.model:
            return self.cfg.model
        r = await self.client.get("/v1/models")
        r.raise_for_status()
        return r.json()["data"][0]["id"]

    async def _one_prefill(self, model: str, isl: int) -> tuple[float, int] | None:
        t0 = time.perf_counter()
        r = await self.client.post("/v1/completions", json={"model": model, "prompt": _prompt(self.rng, isl),
                                                             "max_tokens": 1, "stream": False})
        if r.status_code != 200:
            return None
        return time.perf_counter() - t0, int(r.json()["usage"]["prompt_tokens"])

    async def prefill_level(self, model: str, isl: int, rate: float) -> dict | None:
        d = self.cfg.level_duration_s
        tasks, t = [], 0.0
        start = time.perf_counter()
        while True:
            t += self.rng.expovariate(rate)
            if t > d:
                break
            await asyncio.sleep(max(0.0, start + t - time.perf_counter()))
            tasks.append(asyncio.create_task(self._one_prefill(model, isl)))
        results = [r for r in await asyncio.gather(*tasks) if r is not None]
        elapsed = time.perf_counter() - start
        if not results:
            return None
        lat = np.array([r[0] for r in results])
        toks = np.array([r[1] for r in results])
        return {"isl": float(np.mean(toks)), "throughputTokensPerS": float(toks.sum() / elapsed),
                "ttftMeanMs": 1000 * float(lat.mean()), "ttftTailMs": 1000 * float(np.quantile(lat, self.cfg.tail_quantile)),
                "_offered": len(tasks) * float(np.mean(toks)) / d, "_n": len(results)}

    async def _one_decode(self, model: str, ctx: int) -> tuple[list[float], int] | None:
        gaps, last, n = [], None, 0
        body = {"model": model, "prompt": _prompt(self.rng, ctx), "max_tokens": self.cfg.decode_tokens,
                "stream": True, "ignore_eos": True, "stream_options": {"include_usage": True}}
        async with self.client.stream("POST", "/v1/completions", json=body) as r:
            if r.status_code != 200:
                return None
            async for line in r.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("choices"):
                    now = time.perf_counter()
                    if last is not None:
                        gaps.append(now - last)
                    last = now
                    n += 1
        return gaps, n

    async def decode_level(self, model: str, ctx: int, conc: int) -> dict | None:
        stop = time.perf_counter() + self.cfg.level_duration_s
        gaps: list[float] = []
        tokens = 0
        start = time.perf_counter()

        async def stream_loop() -> None:
            nonlocal tokens
            while time.perf_counter() < stop:
                out = await self._one_decode(model, ctx)
                if out is None:
                    return
                gaps.extend(out[0])
                tokens += out[1]

        await asyncio.gather(*(stream_loop() for _ in range(conc)))
        if not gaps:
            return None
        g = np.array(gaps)
        return {"context": float(ctx + self.cfg.decode_tokens / 2), "concurrency": float(conc),
                "throughputTokensPerS": tokens / (time.perf_counter() - start),
                "itlMeanMs": 1000 * float(g.mean()), "itlTailMs": 1000 * float(np.quantile(g, self.cfg.tail_quantile))}

    async def run(self) -> CapacityProfile:
        cfg = self.cfg
        model = await self.model()
        pre: list[dict] = []
        for isl in cfg.isls:
            alone = await self._one_prefill(model, isl)
            if alone is None:
                raise ValueError(f"{cfg.endpoint}: a {isl}-token prefill failed")
            base_rate = 1.0 / max(alone[0], 1e-3)  # one request at a time
            for mult in (0.25, 0.5, 1, 2, 4, 8, 16, 32):
                level = await self.prefill_level(model, isl, base_rate * mult)
                if level is None:
                    break
                self.progress(f"prefill isl={isl} rate={base_rate * mult:.2f}/s ttft_tail={level['ttftTailMs']:.0f}ms")
                saturated = level["throughputTokensPerS"] < 0.9 * level.pop("_offered")
                level.pop("_n")
                pre.append(level)
                if saturated or level["ttftTailMs"] > 1000 * cfg.max_latency_s:
                    break
        dec: list[dict] = []
        for ctx in cfg.contexts:
            conc = 1
            while conc <= cfg.max_concurrency:
                level = await self.decode_level(model, ctx, conc)
                if level is None:
                    break
                self.progress(f"decode ctx={ctx} n={conc} itl_tail={level['itlTailMs']:.1f}ms")
                dec.append(level)
                if level["itlTailMs"] > 1000 * cfg.max_latency_s:
                    break
                conc *= 2
        if not pre or not dec:
            raise ValueError(f"{cfg.endpoint}: the sweep produced no usable measurements")
        # Measured ISLs vary slightly around the target: snap each to its target so
        # the levels of one ISL group together.
        for p in pre:
            p["isl"] = float(min(cfg.isls, key=lambda s: abs(s - p["isl"])))
        return CapacityProfile.model_validate({
            "version": PROFILE_VERSION, "model": model, "hardware": "measured", "source": f"sweep {cfg.endpoint}",
            "tailQuantile": cfg.tail_quantile,
            "prefill": {"tensorParallelSize": 1, "points": pre},
            "decode": {"tensorParallelSize": 1, "points": dec},
        })

    async def aclose(self) -> None:
        await self.client.aclose()
