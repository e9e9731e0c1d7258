"""The KV index keys workers' blocks from the token ids in their BlockStored events,
chained through parents, independent of vLLM's hash algorithm and seed; vLLM's
hashes only address removals."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from pdserve.router.core.block_hasher import BlockHasher
from pdserve.router.core.kv_index import AllBlocksCleared, BlockRemoved, BlockStored, KvIndex

BS = 4


def chain_events(tokens: list[int], vhash, *, start: int = 0, n: int | None = None, medium: str | None = "GPU",
                 per_event: int = 2, **kw) -> list[BlockStored]:
    """Events a vLLM worker would publish for ``tokens``' blocks [start, start+n), in
    batches of ``per_event`` blocks; ``vhash(i)`` is that worker's hash of block i."""
    n = len(tokens) // BS - start if n is None else n
    out = []
    for b in range(start, start + n, per_event):
        blocks = list(range(b, min(b + per_event, start + n)))
        out.append(BlockStored(block_hashes=tuple(vhash(i) for i in blocks),
                               parent_block_hash=vhash(b - 1) if b > 0 else None,
                               token_ids=tuple(tokens[blocks[0] * BS : (blocks[-1] + 1) * BS]),
                               block_size=BS, medium=medium, **kw))
    return out


def index() -> KvIndex:
    return KvIndex(BlockHasher(BS))


def test_workers_with_different_hash_algorithms_match_the_same_request_keys() -> None:
    idx = index()
    prompt = list(range(100, 124))  # 6 blocks
    for ev in chain_events(prompt, lambda i: 1000 + i):  # say sha256 with one seed
        idx.apply("a", ev)
    for ev in chain_events(prompt[:12], lambda i: (7 * i + 3) << 40):  # xxhash, another seed
        idx.apply("b", ev)
    keys = idx.request_keys(prompt)
    assert len(keys) == 6
    assert idx.overlaps(keys) == {"a": 6, "b": 3}
    # a prompt sharing only the first block
    other = prompt[:4] + [9] * 20
    assert idx.overlaps(idx.request_keys(other)) == {"a": 1, "b": 1}
    assert idx.overlaps(idx.request_keys([5] * 24)) == {}


def test_removal_by_vllm_hash_and_clear() -> None:
    idx = index()
    prompt = list(range(24))
    for ev in chain_events(prompt, lambda i: 50 + i):
        idx.apply("a", ev)
    idx.apply("a", BlockRemoved(block_hashes=(52,), medium="GPU"))  # block 2 evicted
    keys = idx.request_keys(prompt)
    assert idx.overlaps(keys) == {"a": 2}
    assert idx.blocks_of("a") == 5
    idx.apply("a", AllBlocksCleared())
    assert idx.overlaps(keys) == {} and idx.blocks_of("a") == 0


def test_a_block_in_two_media_is_held_until_both_copies_go() -> None:
    idx = index()
    prompt = list(range(8))
    for medium in ("GPU", "CPU"):
        for ev in chain_events(prompt, lambda i: 10 + i, medium=medium):
            idx.apply("a", ev)
    idx.apply("a", BlockRemoved(block_hashes=(10, 11), medium="GPU"))
    assert idx.overlaps(idx.request_keys(prompt)) == {"a": 2}
    idx.apply("a", BlockRemoved(block_hashes=(10, 11), medium="CPU"))
    assert idx.overlaps(idx.request_keys(prompt)) == {}


def test_identical_blocks_cached_twice_are_held_until_both_are_removed() -> None:
    # vLLM's block pool does not de-duplicate: two copies, two BlockStored, two BlockRemoved.
    idx = index()
    prompt = list(range(8))
    for _ in range(2):
        for ev in chain_events(prompt, lambda i: 10 + i):
            idx.apply("a", ev)
    idx.apply("a", BlockRemoved(block_hashes=(10, 11), medium="GPU"))
    assert idx.overlaps(idx.request_keys(prompt)) == {"a": 2}
    idx.apply("a", BlockRemoved(block_hashes=(10, 11), medium="GPU"))
    assert idx.blocks_of("a") == 0
    # a child stored after one copy went still chains from the remaining copy
    for ev in chain_events(prompt, lambda i: 10 + i):
        idx.apply("a", ev)
    idx.apply("a", BlockStored(block_hashes=(12,), parent_block_hash=11, token_ids=(8, 9, 10, 11), block_size=BS,
                               medium="GPU"))
    assert idx.overlaps(idx.request_keys(list(range(12)))) == {"a": 3}


def test_block_size_mismatch_orphans_partial_blocks_and_sliding_window_groups_are_not_indexed() -> None:
    idx = index()
    prompt = list(range(16))
    idx.apply("a", BlockStored(block_hashes=(1,), token_ids=tuple(prompt[:8]), block_size=8))
    assert idx.skipped_block_size == 1 and len(idx) == 0
    # parent never seen (events lost): nothing keyed from it
    idx.apply("a", BlockStored(block_hashes=(2,), parent_block_hash=99, token_ids=tuple(prompt[4:8]), block_size=BS))
    assert idx.orphans == 1 and len(idx) == 0
    # a partial trailing block is not a cache hit vLLM can serve
    idx.apply("b", BlockStored(block_hashes=(3, 4), token_ids=tuple(prompt[:6]), block_size=BS))
    assert idx.overlaps(idx.request_keys(prompt)) == {"b": 1}
    for ev in chain_events(prompt, lambda i: 70 + i, group_idx=1, kv_cache_spec_kind="sliding_window"):
        idx.apply("c", ev)
    for ev in chain_events(prompt, lambda i: 80 + i, group_idx=0, kv_cache_spec_kind="full_attention"):
        idx.apply("c", ev)
    assert idx.overlaps(idx.request_keys(prompt))["c"] == 4
    idx.apply("c", BlockRemoved(block_hashes=(70, 71, 72, 73), group_idx=1, medium="GPU"))  # other group
    assert idx.overlaps(idx.request_keys(prompt))["c"] == 4


def test_cache_salt_and_lora_blocks_match_only_such_requests() -> None:
    idx = index()
    prompt = list(range(12))
    # vLLM 0.33's untagged extra keys: the salt on block 0, the LoRA name on every block.
    idx.apply("salted", BlockStored(block_hashes=(1, 2, 3), token_ids=tuple(prompt), block_size=BS,
                                    extra_keys=(("s3cret",), None, None)))
    idx.apply("lora", BlockStored(block_hashes=(1, 2, 3), token_ids=tuple(prompt), block_size=BS,
                                  lora_name="sql-adapter", lora_id=1,
                                  extra_keys=(("sql-adapter",), ("sql-adapter",), ("sql-adapter",))))
    assert idx.overlaps(idx.request_keys(prompt)) == {}
    assert idx.overlaps(idx.request_keys(prompt, cache_salt="s3cret")) == {"salted": 3}
    assert idx.overlaps(idx.request_keys(prompt, cache_salt="other")) == {}
    assert idx.overlaps(idx.request_keys(prompt, model="sql-adapter")) == {"lora": 3}
    assert idx.overlaps(idx.request_keys(prompt, model="base")) == {}


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.integers(0, 2), min_size=0, max_size=6), min_size=1, max_size=4),
       st.lists(st.integers(0, 2), max_size=6), st.integers(0, 2**32))
def test_overlap_equals_the_longest_common_block_prefix(cached, prompt_blocks, seed) -> None:
    """Workers cache prompts made of blocks drawn from 3 block contents; a request's
    overlap per worker is the longest block prefix it shares with any cached prompt."""
    contents = [[10, 11, 12, 13], [20, 21, 22, 23], [30, 31, 32, 33]]
    rnd = random.Random(seed)
    idx = index()
    expected: dict[str, int] = {}
    prompt = [t for b in prompt_blocks for t in contents[b]]
    for w, blocks in enumerate(cached):
        tokens = [t for b in blocks for t in contents[b]]
        salt = rnd.getrandbits(64)  # each worker: its own hash algorithm/seed
        def vhash(i: int, salt: int = salt, tokens: list[int] = tokens) -> int:
            return hash((salt, tuple(tokens[: (i + 1) * BS])))

        for ev in chain_events(tokens, vhash, per_event=rnd.randint(1, 3)):
            idx.apply(f"w{w}", ev)
        n = 0
        while n < min(len(blocks), len(prompt_blocks)) and blocks[n] == prompt_blocks[n]:
            n += 1
        if n:
            expected[f"w{w}"] = max(expected.get(f"w{w}", 0), n)
    assert idx.overlaps(idx.request_keys(prompt)) == expected
