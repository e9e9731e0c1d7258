"""The prefill-backlog rule (RoutingSpec.max_prefill_queue_tokens) in the simulator: the same
Scheduler.plan as the live router decides, and the decode engine that takes a prompt pays for it
in its own mixed (chunked-prefill) steps, so the decodes it runs slow down meanwhile."""

from __future__ import annotations

from pdserve.router.core.spec import RoutingSpec
from pdserve.sim.config import SimConfig
from pdserve.sim.metrics import RequestRecord
from pdserve.sim.simulator import Simulation
from pdserve.sim.traces import from_rows

PROMPT = 8000
# A long-running decode (request 0), then a burst of eight 8,000-token prompts 10 ms apart:
# each arrives before any of them is prefilled (one takes ~0.26 s on the 8B H100 profile).
ROWS = [(0.0, 1000, 400, (1, 2))] + [(1.0 + 0.01 * k, PROMPT, 4, tuple(range(100 + 20 * k, 116 + 20 * k)))
                                     for k in range(8)]
TRACE = from_rows(ROWS, format="mooncake", source="burst")


def _run(limit: int, decode_budget: int | None = None) -> list[RequestRecord]:
    cfg = SimConfig(prefill_instances=1, decode_instances=1, routing=RoutingSpec(max_prefill_queue_tokens=limit),
                    decode_token_budget=decode_budget)
    res = Simulation(TRACE, cfg).run()
    assert res.summary.finished == len(ROWS)
    return sorted(res.records, key=lambda r: r.index)


def _modes(recs: list[RequestRecord]) -> list[str]:
    return ["pd" if r.prefill_instance else "local" for r in recs]


def test_a_burst_overflows_onto_the_decode_engine_and_slows_its_decodes() -> None:
    off, on = _run(0), _run(2 * PROMPT)
    assert _modes(off) == ["pd"] * 9
    # By hand, P0's queue when each burst prompt arrives (request 0's prefill is long done) and the
    # decode engine's: 0, 8k, 16k: P/D (not above 16k); 24k: local, D0 8k < 32k; 16k < 32k; 24k < 32k;
    # then D0 would finish after 32k, not fewer than P0's 32k: P/D; then P0 32k, D0 32k < 40k: local.
    assert _modes(on) == ["pd", "pd", "pd", "pd", "local", "local", "local", "pd", "local"]
    assert [r.decode_instance for r in on] == ["D0"] * 9
    # The burst's worst first token comes sooner: four prompts no longer wait behind seven on P0.
    assert max(r.ttft for r in on[1:]) < 0.6 * max(r.ttft for r in off[1:])
    # The decode engine ran those prompts in its own steps: request 0's decodes shared them.
    assert on[0].tpot > 1.2 * off[0].tpot


def test_a_smaller_decode_token_budget_bounds_the_steps_that_carry_prompts() -> None:
    """vLLM's --max-num-batched-tokens on the decode pool: at 8192 one decode step carries an 8,192-token
    chunk (~0.3 s on this profile), so the local prompts, decoding behind each other's chunks, miss a
    50 ms TPOT; at 1024 a step carries at most 1,024 prompt tokens (~37 ms) and they meet it."""
    wide, narrow = _run(2 * PROMPT), _run(2 * PROMPT, decode_budget=1024)
    assert _modes(narrow) == _modes(wide)
    local = [i for i, m in enumerate(_modes(wide)) if m == "local"]
    assert max(wide[i].tpot for i in local) > 0.05 > max(narrow[i].tpot for i in local)
    # P/D only, the decode engines never prefill: their budget changes nothing.
    assert [(r.first_token_s, r.finish_s) for r in _run(0)] == [(r.first_token_s, r.finish_s) for r in _run(0, 1024)]
