"""The per-request gap classification (bench/router/routing_gap.py) and the Dynamo-rule baseline
(bench/router/dynamo_rule.py) on hand-made cases whose answers are worked out by hand."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "router"))
sys.path.insert(0, str(ROOT / "bench"))

from dynamo_rule import DynamoRulePolicy  # noqa: E402
from routing_gap import BLOCK, compare  # noqa: E402

from pdserve.router.core.kv_index import KvIndex  # noqa: E402
from pdserve.router.policies import RouteRequest, WorkerView  # noqa: E402


def _run(hit: float, rows: list[tuple]) -> dict:
    return {"hit_ratio": hit, "requests": rows}


def test_gap_classes_split_by_what_the_other_side_held() -> None:
    n = 10 * BLOCK + 1  # 10 blocks reusable (the last token never is)
    pd = _run(0.1, [(0, n, "P0", 4, 8, 8),      # pdserve held 4 where it went, 8 on another worker (seen)
                    (5, n, "P1", 6, 6, 6),      # pdserve held 6; Dynamo held 2, nowhere more
                    (7, n, "P3", 0, 9, 0),      # held 9 elsewhere, but the view showed none of it
                    (9, n, "P2", 0, 0, 0)])     # ambiguous on Dynamo's side: left out
    dy = _run(0.2, [(0, n, "1", 7, 7, 7), (5, n, "0", 2, 2, 2), (7, n, "1", 5, 5, 5), (9, n, "2", 9, 9, 9),
                    (9, n, "3", 9, 9, 9)])
    total = 4 * n
    x = compare(pd, dy, total)
    assert x["ambiguous_requests"] == 1
    assert x["pdserve_dispatch"] == pytest.approx(10 * BLOCK / total)
    assert x["dynamo_dispatch"] == pytest.approx(14 * BLOCK / total)
    # request 0: Dynamo 7 vs pdserve 4, and pdserve had (and saw) 8 elsewhere: routed away, 3 blocks
    assert x["dynamo_ahead_routed_away"] == pytest.approx(3 * BLOCK / total)
    # request 7: Dynamo 5 vs pdserve 0; pdserve held 9 elsewhere but its view showed 0 there
    assert x["dynamo_ahead_routed_away_unseen"] == pytest.approx(5 * BLOCK / total)
    assert "dynamo_ahead_not_cached_anywhere" not in x
    # request 1: pdserve 6 vs Dynamo 2, Dynamo held at most 2 anywhere: not cached there, 4 blocks
    assert x["pdserve_ahead_not_cached_anywhere"] == pytest.approx(4 * BLOCK / total)
    assert x["pdserve_lost_while_queued"] == pytest.approx(10 * BLOCK / total - 0.1)
    assert x["dynamo_lost_while_queued"] == pytest.approx(14 * BLOCK / total - 0.2)


def test_gap_caps_a_full_hit_at_the_prompts_last_token() -> None:
    n = 4 * BLOCK  # 4 full blocks, but only 3 are reusable: vLLM recomputes the last token
    x = compare(_run(0.0, [(0, n, "P0", 4, 4, 4)]), _run(0.0, [(0, n, "0", 3, 3, 3)]), n)
    assert x["pdserve_dispatch"] == x["dynamo_dispatch"] == pytest.approx(3 / 4)
    assert "pdserve_ahead_not_cached_anywhere" not in x


def _req(rid: str, hashes: list[int], tokens: int) -> RouteRequest:
    return RouteRequest(request_id=rid, token_ids=(), block_hashes=hashes, prompt_tokens=tokens)


def test_dynamo_rule_cost_is_prefill_blocks_minus_overlap_plus_active_blocks() -> None:
    index = KvIndex()
    index.store("A", [1, 2, 3, 4])
    pol = DynamoRulePolicy(index, block_size=16, pool="prefill")
    views = [WorkerView("A"), WorkerView("B")]
    req = _req("r1", [1, 2, 3, 4, 5, 6], 6 * 16)
    d = pol.select(req, views, 0.0)
    # A: 6 prefill blocks - 4 cached + 6 new blocks = 8; B: 6 + 6 = 12
    assert (d.worker_id, d.score, d.overlap_blocks, d.new_prefill_tokens) == ("A", 8.0, 4, 2 * 16)
    pol.on_routed(d, req, 0.0)
    # B now beats A for an unrelated prompt: A carries r1's 6 active blocks and its 2 uncached blocks' prefill
    other = _req("r2", [7, 8], 2 * 16)
    d2 = pol.select(other, views, 0.1)
    assert (d2.worker_id, d2.score) == ("B", 4.0)
    # a prompt sharing r1's blocks is cheaper on A: shared active blocks are not counted twice
    same = _req("r3", [1, 2, 3, 4, 5, 6, 9], 7 * 16)
    scores = {w.worker_id: pol.select(same, [w], 0.2).score for w in views}
    assert scores == {"A": (2 + 7 - 4) + 6 + 1, "B": 7 + 7}
    pol.on_prefill_done("r1", 1.0)  # a prefill worker's request stops being active with its prompt
    assert pol.select(other, [WorkerView("A")], 1.1).score == 4.0


def test_dynamo_rule_keeps_an_aggregated_request_active_until_it_ends() -> None:
    pol = DynamoRulePolicy(KvIndex(), block_size=16, pool="colocated")
    req = _req("r1", [1, 2], 2 * 16)
    pol.on_routed(pol.select(req, [WorkerView("A")], 0.0), req, 0.0)
    pol.on_prefill_done("r1", 0.5)
    assert pol.select(_req("r2", [7], 16), [WorkerView("A")], 0.6).score == 1 + 2 + 1
    pol.on_finished("r1", "A", 2.0)
    assert pol.select(_req("r2", [7], 16), [WorkerView("A")], 2.1).score == 1 + 1


def test_dynamo_rule_breaks_ties_at_random_but_repeatably() -> None:
    views = [WorkerView(w) for w in "ABCD"]
    pols = [DynamoRulePolicy(KvIndex(), block_size=16, pool="prefill", seed=s) for s in (1, 1, 2)]
    picks = [[p.select(_req(str(i), [i], 16), views, 0.0).worker_id for i in range(20)] for p in pols]
    assert picks[0] == picks[1] and picks[0] != picks[2] and len(set(picks[0])) > 1
