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
    # Pinned at session 20's switch from blake2b-64 to xxh3-64 (the values before it: 0869d0e's test). Keys never
    # leave the router's process (the index is rebuilt from events after a restart), but a change here re-keys
    # every prompt: it must be deliberate.
    h = BlockHasher(4)
    ids = [*range(-3, 14), 2**40, 2**62]
    assert h.request_keys(ids) == [958311798700319569, 3464742965478030509, 4331892099458047040,
                                   18391167981978018540]
    assert h.request_keys(ids, cache_salt="s", lora_name="l") == [5817334182221376766, 11952189170322164856,
                                                                  15374100117103132371, 1095141205995901463]


def test_the_keys_are_xxh3_of_the_documented_layout() -> None:
    """The first two keys rebuilt from the module docstring's layout with the xxhash package alone: block 0 is
    xxh3-64 of 8 zero bytes, the block size (<I), the ids (<q each) and the extra keys' repr; a later block's parent
    field is b"\\x01" and its parent's key, 8 bytes big-endian."""
    import struct

    import xxhash

    ids = [5, -1, 2**40, 7, 0, 1, 2, 3]
    extra = repr(("l", "s")).encode()
    k0 = xxhash.xxh3_64_intdigest(b"\x00" * 8 + struct.pack("<I", 4) + struct.pack("<4q", *ids[:4]) + extra)
    k1 = xxhash.xxh3_64_intdigest(b"\x01" + k0.to_bytes(8, "big") + struct.pack("<I", 4) + struct.pack("<4q", *ids[4:])
                                  + repr(("l",)).encode())
    assert BlockHasher(4).request_keys(ids, cache_salt="s", lora_name="l") == [k0, k1]
