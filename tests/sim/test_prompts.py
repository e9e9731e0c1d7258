"""Synthetic prompts: equal Mooncake hash ids give equal tokens, equal vLLM hashes, equal keys."""

from __future__ import annotations

from typing import cast

import pytest

from pdserve.worker.engine import Engine, EngineConfig, EngineRequest
from pdserve.worker.perf import PerfModel, load_profile
from pdserve.worker.vllm_hash import block_hashes
from pdserve.sim.prompts import ZeroPrompt, block_keys, token_ids
from pdserve.sim.traces import TraceRequest


PERF = PerfModel(load_profile("llama-3.1-8b-h100"))


def common_prefix(a: list, b: list) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def test_shared_hash_ids_share_tokens_hashes_and_keys() -> None:
    a = TraceRequest(0, 0.0, 1500, 10, (7, 8, 9))
    b = TraceRequest(1, 1.0, 1400, 10, (7, 8, 4))
    ta, tb = token_ids(a), token_ids(b)
    assert len(ta) == 1500 and len(tb) == 1400
    assert common_prefix(ta, tb) == 1024  # two shared 512-token blocks, then different content
    # vLLM's chained block hashes (its default sha256, as the mock emulates it) agree on exactly those 64 blocks of 16 tokens...
    assert common_prefix(block_hashes(ta, 16), block_hashes(tb, 16)) == 64
    # ...and so do the simulator's cheap keys, at 16- and 512-token block sizes.
    assert common_prefix(block_keys(a, 16), block_keys(b, 16)) == 64
    assert common_prefix(block_keys(a, 512), block_keys(b, 512)) == 2
    assert len(block_keys(a, 16)) == 1500 // 16


def test_prompts_without_hash_ids_share_nothing() -> None:
    reqs = [TraceRequest(i, 0.0, 64, 5) for i in range(4)]
    keys = [block_keys(r, 16) for r in reqs]
    assert len({k[0] for k in keys}) == 4
    toks = [token_ids(r) for r in reqs]
    assert all(common_prefix(toks[0], t) < 16 for t in toks[1:])
    assert all(1000 <= t < 32000 for t in toks[0])


def test_a_block_straddling_two_hash_blocks_depends_on_both() -> None:
    # 384-token blocks over 512-token hash blocks: block 1 covers tokens 384-767.
    a = TraceRequest(0, 0.0, 1024, 1, (1, 2))
    b = TraceRequest(1, 0.0, 1024, 1, (1, 3))
    ka, kb = block_keys(a, 384), block_keys(b, 384)
    assert ka[0] == kb[0] and ka[1] != kb[1]


def test_zero_prompt_reads_as_a_list_of_zeros() -> None:
    n = 1000
    z, ref = ZeroPrompt(n), [0] * n
    assert len(z) == n and z[0] == 0 and z[-1] == 0
    for sl in (slice(0, 16), slice(990, 1010), slice(5, None), slice(None, 3), slice(2000, 2100), slice(10, 2)):
        assert z[sl] == ref[sl]
    assert z + [7, 8] == ref + [7, 8]
    assert z == ref and z != [0] * (n - 1) and z != [1] * n and list(z) == ref
    with pytest.raises(IndexError):
        z[n]


def test_an_engine_steps_a_zero_prompt_as_the_list() -> None:
    """Block hashes past the supplied keys (the straddling and output blocks) come out the same."""
    cfg = EngineConfig(num_blocks=64, block_size=16)
    engines = [Engine(cfg, PERF), Engine(cfg, PERF)]
    outs: list[list[object]] = [[], []]
    for e, prompt, out in zip(engines, ([0] * 100, ZeroPrompt(100)), outs):
        req = EngineRequest(request_id="a", prompt_token_ids=cast("list[int]", prompt), max_tokens=40, ignore_eos=True)
        req.block_hashes = [b"k%d" % i for i in range(3)]  # keys for 3 of the prompt's 6 full blocks
        e.add_request(req, 0.0)
        t = 0.0
        while e.has_work():
            o = e.step(t)
            t += o.duration
            out.append((o.duration, [(x.token_id, x.index, x.finished) for x in o.tokens],
                        [(s.block_hashes, s.parent_block_hash) for s in o.kv_events.stored]))
        assert len(req.block_hashes) == (100 + 40 - 1) // 16
    assert outs[0] == outs[1] and len(outs[0]) == 40


def test_key_hasher_chains_like_vllm_hashes_and_is_the_same_in_every_process() -> None:
    """The simulator's keys for output-filled blocks: equal exactly where vLLM's sha256 chain is equal, and the
    same numbers whatever PYTHONHASHSEED a process has (Python 3.11 hashes None by its address, strings by seed)."""
    import os
    import subprocess
    import sys

    from pdserve.sim.prompts import KeyHasher
    from pdserve.worker.vllm_hash import BlockHasher

    keys, sha = KeyHasher(), BlockHasher()
    blocks = [[1, 2, 3], [1, 2, 3], [1, 2, 4], [0, 0, 0]]
    for parent in (None, 17, 18):
        ours = [keys.hash_block(cast(bytes, parent), b) for b in blocks]
        theirs = [sha.hash_block(cast(bytes, parent), b) for b in blocks]
        assert [[x == y for y in ours] for x in ours] == [[x == y for y in theirs] for x in theirs]
    assert keys.hash_block(cast(bytes, 17), [1, 2, 3]) != keys.hash_block(cast(bytes, 18), [1, 2, 3])
    assert keys.hash_block(None, [5]) == keys.hash_block(cast(bytes, 0), [5])  # a falsy parent is the root, as vLLM's
    code = ("from pdserve.sim.prompts import KeyHasher; h = KeyHasher(); a = h.hash_block(None, [9, 8]); "
            "print(a, h.hash_block(a, list(range(512))))")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2", "random")}
    assert len(outs) == 1, outs


def test_interned_keys_are_small_nonzero_and_equal_exactly_where_the_keys_are() -> None:
    from pdserve.sim.prompts import KeyIds

    # Mooncake's hash ids: one per (started) 512-token block
    reqs = [TraceRequest(0, 0.0, 2100, 5, (1, 2, 3, 4, 7)), TraceRequest(1, 0.0, 1600, 5, (1, 2, 9, 9)),
            TraceRequest(2, 0.0, 1000, 5, ()), TraceRequest(3, 0.0, 3000, 5, (1, 2, 3, 4, 5, 6))]
    for bs in (512, 256, 16):
        raw = [block_keys(r, bs) for r in reqs]
        ids, again = KeyIds(), KeyIds()
        small = [block_keys(r, bs, interned=ids) for r in reqs]
        assert small == [block_keys(r, bs, interned=again) for r in reqs]  # the same in every replay
        flat_raw, flat_small = [k for ks in raw for k in ks], [k for ks in small for k in ks]
        assert all(0 < k < 2**30 for k in flat_small)
        assert [[a == b for b in flat_raw] for a in flat_raw] == [[a == b for b in flat_small] for a in flat_small]
