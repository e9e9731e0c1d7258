"""Prefix hits of prompts a decode engine prefills itself (P/D skipped) count in the hit ratio.

The ratio counts each prompt where it was prefilled: prefill engines, and decode engines
for local prefills; a decode engine's admission of KV it received from a prefill engine is
not a query (its tokens were counted on the prefill side)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pdserve.router.core.spec import RoutingSpec
from pdserve.sim.config import SimConfig
from pdserve.sim.simulator import Simulation
from pdserve.sim.traces import from_rows

BLOCK = 512
PROMPT = 2 * BLOCK + 76  # two full hash blocks and a partial one, which vLLM never caches
# The same prompt four times, far enough apart that each has finished before the next.
TRACE = from_rows([(30.0 * k, PROMPT, 4, (1, 2, 3)) for k in range(4)], format="mooncake", source="repeats")
# Every repeat reuses the two full blocks: 3 x 1024 of 4 x 1100 prompt tokens.
EXPECTED = 3 * 2 * BLOCK / (4 * PROMPT)


def _run(routing: RoutingSpec, prefill: int = 1) -> tuple[float | None, list[str]]:
    cfg = SimConfig(prefill_instances=prefill, decode_instances=1, block_size=BLOCK, routing=routing)
    res = Simulation(TRACE, cfg).run()
    assert res.summary.finished == 4
    modes = ["pd" if r.prefill_instance else "local" for r in sorted(res.records, key=lambda r: r.index)]
    return res.summary.prefix_hit_ratio, modes


def test_every_prompt_prefilled_by_the_decode_engine() -> None:
    ratio, modes = _run(RoutingSpec(block_size=BLOCK, disagg_threshold_tokens=10**6))
    assert modes == ["local"] * 4
    assert ratio == pytest.approx(EXPECTED)


def test_pd_counts_each_prompt_once_on_the_prefill_side() -> None:
    ratio, modes = _run(RoutingSpec(block_size=BLOCK))
    assert modes == ["pd"] * 4
    assert ratio == pytest.approx(EXPECTED)  # the decode engine's admissions of received KV are not queries


def test_a_decode_engine_prefills_what_it_received_before() -> None:
    # Round robin over two prefill engines offers the repeats to the one that never saw the
    # prompt (it moves on only when a prompt is sent there); the decode engine cached the KV
    # it received for the first one, so they go local (76 uncached tokens there, 1100 on
    # that prefill engine).
    spec = RoutingSpec(policy="round_robin", decode_policy="kv_aware", block_size=BLOCK,
                       decode_reuse_threshold_tokens=BLOCK)
    ratio, modes = _run(spec, prefill=2)
    assert modes == ["pd", "local", "local", "local"]
    assert ratio == pytest.approx(EXPECTED)
    # Without the rule the repeats sent to the other prefill engine recompute the prompt.
    ratio, modes = _run(replace(spec, decode_reuse_threshold_tokens=0), prefill=2)
    assert modes == ["pd"] * 4 and ratio < EXPECTED
