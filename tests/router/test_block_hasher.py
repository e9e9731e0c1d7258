"""A prompt's block keys (``BlockHasher.request_keys``, the router's per-request hashing)
must be the keys of its blocks chained one by one (``BlockHasher.key``, what the KV index
computes from a worker's events): a request matches a worker's blocks only if both agree."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pdserve.router.core.block_hasher import BlockHasher


def chained(h: BlockHasher, ids: list[int], cache_salt: str | None, lora_name: str | None) -> list[int]:
    keys: list[int] = []
    parent: int | None = None
    bs = h.block_size
    lora = (lora_name,) if lora_name else ()
    for start in range(0, len(ids) - len(ids) % bs, bs):
        extra = lora + (cache_salt,) if cache_salt and start == 0 else lora
        parent = h.key(parent, ids[start : start + bs], extra or None)
        keys.append(parent)
    return keys


@settings(max_examples=300, deadline=None)
@given(ids=st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=80),
       block_size=st.integers(min_value=1, max_value=17),
       cache_salt=st.none() | st.text(max_size=5), lora_name=st.none() | st.text(max_size=5))
def test_request_keys_are_the_blocks_chained_one_by_one(ids: list[int], block_size: int, cache_salt: str | None,
                                                        lora_name: str | None) -> None:
    h = BlockHasher(block_size)
    assert h.request_keys(ids, cache_salt=cache_salt, lora_name=lora_name) == chained(h, ids, cache_salt, lora_name)


def test_request_keys_are_unchanged() -> None:
    # Computed by the implementation before the per-block hash state was copied (0869d0e):
    # keys are compared across router restarts and versions only through the index, but a
    # change here would silently re-key every prompt.
    h = BlockHasher(4)
    ids = [*range(-3, 14), 2**40, 2**62]
    assert h.request_keys(ids) == [11364539625353575299, 1594211115372288282, 7743025425991786675,
                                   13745915651665898082]
    assert h.request_keys(ids, cache_salt="s", lora_name="l") == [784610414065976683, 17337439296317568525,
                                                                  7389952249762214430, 12873940956477987270]
