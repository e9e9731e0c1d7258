"""The block pool's and the engine's prefix-cache rules against vLLM's source.

vLLM 0.33 ``v1/core/block_pool.py`` ``free_blocks``: freed blocks without a hash are
prepended to the free queue (``prepend_n``), cached ones appended (``append_n``); 0.11
appends both. vLLM 0.11 and 0.33 ``KVCacheManager.allocate_slots`` caches the blocks a
step will fill when it allocates them, so the scheduler's next waiting request finds them.
These two rules are why Dynamo 1.6.1's replay (whose mocker follows 0.33) held more of
the Mooncake prompts than pdserve's simulator on 4P4D (bench/router/README.md).
"""

from __future__ import annotations

import pytest

from pdserve.worker.engine import Engine, EngineConfig, EngineRequest
from pdserve.worker.kvcache import BlockPool
from pdserve.worker.perf import PerfModel, load_profile

PERF = PerfModel(load_profile("llama-3.1-8b-h100"))
BS = 16


def _cache(pool: BlockPool, blocks: list[int], hashes: list[bytes]) -> None:
    pool.cache_blocks(blocks, hashes, 0, len(hashes), list(range(len(hashes) * BS)), BS)


@pytest.mark.parametrize(("uncached_first", "x_survives"), [(True, True), (False, False)])
def test_a_freed_partial_block_is_reused_before_an_older_cached_block(uncached_first: bool, x_survives: bool) -> None:
    pool = BlockPool(4, uncached_first=uncached_first)
    x = pool.allocate(1)
    _cache(pool, x, [b"x"])
    pool.free_blocks(x)  # x: cached, least recently used
    a = pool.allocate(3)
    _cache(pool, a, [b"a0", b"a1"])  # a[2] is a prompt's partial last block: no hash
    pool.free_blocks(a)
    pool.allocate(1)
    # 0.33: the partial block sits at the head and is taken; 0.11: it sits behind x, so x is evicted
    assert (pool.find_prefix([b"x"], 1) == x) is x_survives
    assert (pool.drain_events().removed == []) is x_survives
    assert len(pool.find_prefix([b"a0", b"a1"], 2)) == 2  # a's cached blocks survive either way


def test_freed_uncached_blocks_keep_their_order_at_the_head() -> None:
    pool = BlockPool(4)
    blocks = pool.allocate(3)
    (never_used,) = pool.free
    pool.free_blocks(blocks)  # nothing cached: all prepended, tail first (vLLM frees in reverse order)
    assert list(pool.free) == [*reversed(blocks), never_used]


def test_a_request_admitted_later_in_the_same_step_hits_blocks_scheduled_before_it() -> None:
    e = Engine(EngineConfig(num_blocks=100, block_size=BS), PERF)
    e.add_request(EngineRequest("a", list(range(5000, 5100)), max_tokens=2), 0.0)
    e.add_request(EngineRequest("b", list(range(5000, 5100)), max_tokens=2), 0.0)
    out = e.step(0.0)
    assert out.num_scheduled == 2
    # a's 6 full blocks are cached when allocated; b reuses them and computes its last 4 tokens
    assert e.stats().prefix_hits == 96
    assert out.num_prefill_tokens == 100 + 4


def test_a_waiting_request_hits_the_chunk_a_running_request_schedules_in_the_same_step() -> None:
    e = Engine(EngineConfig(num_blocks=100, block_size=BS, max_num_batched_tokens=64), PERF)
    e.add_request(EngineRequest("a", list(range(5000, 5100)), max_tokens=2), 0.0)
    e.step(0.0)  # a's first 64 tokens: blocks 0-3
    e.add_request(EngineRequest("b", list(range(5000, 5096)) + [1] * 20, max_tokens=2), 0.0)
    out = e.step(0.1)  # a's last 36 tokens (blocks 4-5 become full), then b in the 28 tokens left
    assert out.num_scheduled == 2
    assert e.stats().prefix_hits == 96  # all six of a's blocks, two of them scheduled in this very step
