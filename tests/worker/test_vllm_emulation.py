"""The mock follows the emulated vLLM version: block hashes, NONE_HASH seed rule, KV-event bytes.

The golden hashes were produced by running vLLM's own functions (``sha256`` /
``sha256_cbor`` / ``xxhash`` / ``xxhash_cbor``, ``init_none_hash`` and
``hash_block_tokens``, taken verbatim from the 0.11.0 and 0.33.0 wheels'
``vllm/utils/*`` and ``vllm/v1/core/kv_cache_utils.py``) over tokens 100..139 in
blocks of 16; the conformance tier re-checks them against vLLM itself.
"""

from __future__ import annotations

import msgpack
import pytest

from pdserve.worker import vllm_hash
from pdserve.worker.kv_events import encode_batch, encode_events
from pdserve.worker.kvcache import KvEvents, StoredBlocks
from pdserve.worker.vllm_emulation import VERSIONS, behaviour

TOKENS = list(range(100, 140))

# (version, algo, PYTHONHASHSEED) -> (NONE_HASH, [block 0 hash, block 1 hash]), hex
GOLDEN = {
    ("0.11.0", "sha256", "0"): (
        "1973e23848344dc43a988a9b478663803cfffe1243480253f9a3cf004b14aa7c",
        ["3e333711c2a7b6810fc3053131adb41ae6f863bdfa562bdca49d1a371975611d",
         "387cb57761ddc845a04615ec32fe9e8f6abd64656d0679648b6bed7858297293"]),
    ("0.11.0", "sha256_cbor", "1234"): (
        "dfa66c9da4dad0601316e0b63a2909b4068e72830385ddbd16e0c980c76c9e12",
        ["7eb38a5ccae75fe84593bb8dc91970224fb6c3a915593792de32bee340bfb362",
         "ef2654bc79151a4add1eaa3221886b98760382fd0b3aa25d27dc9e3aed2167fb"]),
    # 0.33 without PYTHONHASHSEED: the fixed "vllm-none-hash" seed for cryptographic algorithms
    ("0.33.0", "sha256", None): (
        "066b1e8987e027138e98701c46128929378935f9b6cd1549105ae6b4f0d71198",
        ["605fd9e311c0890137f4c7df65be59449fb378632eecf434d1ecdf87c874fd55",
         "f1a08810157991d5280c49952540afc2feab260cd65a24bb2e94951059393917"]),
    ("0.33.0", "sha256_cbor", None): (
        "9bd96a485ad84efdafb72ee48a1d7a69bcead0f8f0433173941b276b9581eef0",
        ["c78a554a1b648c084577886fa29e20b89d606beb26cafd7f90ba7482f31901bc",
         "ce46e4cdf9f7c965a59bd3429627f27c1400980fc64be5e6706e1a9c55f39878"]),
    ("0.33.0", "xxhash", "0"): (
        "6fb31cc38bba6066183f7f2104b9c051",
        ["2d6d44d4c8320b45ad8bae4cf295d6ba", "8f8ea72d49e8bd42a518b89755d898a6"]),
    ("0.33.0", "xxhash_cbor", "1234"): (
        "0fd12ee6a63390842c413be31a6766db",
        ["159ead124162d8a454a4604f6cd0d261", "29143d678af6c962b13f17d4af2080ff"]),
}

# cache_salt "s1" on the first block: 0.11 the bare salt, 0.33 ("cache_salt", salt)
SALTED = {
    ("0.11.0", "0"): ["bb317dfe388287397e1ea477b6990333e76c56edae1d34af473e6394c777ab10",
                      "884b09d1c4d19fe1e39ffea89e2f787eceeeb8c19a96fd5cf73c891a4bb40d94"],
    ("0.33.0", None): ["a73dd7bb04afa068ca104f1cced92b6edc9010cafb9aebfd4f53b40effb00cfd",
                       "6d770e32399190506500224c82632420749f69c93bf927415a2431d257770cb6"],
}


@pytest.mark.parametrize(("version", "algo", "seed"), list(GOLDEN))
def test_block_hashes_equal_vllms(version: str, algo: str, seed: str | None) -> None:
    root, blocks = GOLDEN[(version, algo, seed)]
    if algo.startswith("xxhash"):
        pytest.importorskip("xxhash")
    assert vllm_hash.none_hash(algo, version, seed).hex() == root
    assert [h.hex() for h in vllm_hash.block_hashes(TOKENS, 16, algo, version, seed)] == blocks


@pytest.mark.parametrize(("version", "seed"), list(SALTED))
def test_cache_salt_extra_keys_equal_vllms(version: str, seed: str | None) -> None:
    extra = vllm_hash.cache_salt_extra_keys("s1", version)
    assert [h.hex() for h in vllm_hash.block_hashes(TOKENS, 16, "sha256", version, seed, extra)] == SALTED[
        (version, seed)]


def test_default_algorithm_is_sha256_over_pickle_in_both_versions() -> None:
    for version in VERSIONS:
        assert behaviour(version).default_hash_algo == "sha256"


@pytest.mark.parametrize(("version", "algo"), [("0.11.0", "sha256"), ("0.11.0", "sha256_cbor"),
                                               ("0.33.0", "xxhash"), ("0.33.0", "xxhash_cbor")])
def test_none_hash_is_random_per_process_without_pythonhashseed(version: str, algo: str) -> None:
    if algo.startswith("xxhash"):
        pytest.importorskip("xxhash")
    # 0.11: os.urandom(32) whatever the algorithm; 0.33: a random seed for non-cryptographic hashes
    assert vllm_hash.none_hash(algo, version, None) != vllm_hash.none_hash(algo, version, None)
    assert not vllm_hash.is_reproducible(algo, version, None)
    assert vllm_hash.is_reproducible(algo, version, "5")


def test_xxhash_is_refused_on_vllm_0_11() -> None:
    with pytest.raises(ValueError, match="not in vLLM 0.11.0"):
        vllm_hash.hash_fn("xxhash", "0.11.0")


def _events() -> KvEvents:
    h = [bytes([i]) * 32 for i in range(1, 4)]
    ev = KvEvents(cleared=True)
    ev.removed = [h[2]]
    ev.stored = [StoredBlocks([h[0], h[1]], None, list(range(32)), [None, None])]
    return ev


def test_event_encoding_0_11_is_tagged_arrays() -> None:
    payload = encode_batch(1.5, encode_events(_events(), 16, behaviour("0.11.0").event_encoding), 0)
    ext = [vllm_hash.to_external(bytes([i]) * 32) for i in range(1, 4)]
    # vllm 0.11 distributed/kv_events.py: KVCacheEvent(array_like=True, tag=True), EventBatch array_like
    assert msgpack.unpackb(payload) == [1.5, [
        ["AllBlocksCleared"],
        ["BlockRemoved", [ext[2]], "GPU"],
        ["BlockStored", [ext[0], ext[1]], None, list(range(32)), 16, None, "GPU"],
    ], 0]


def test_event_encoding_0_33_is_tagged_maps_with_group_fields() -> None:
    payload = encode_batch(1.5, encode_events(_events(), 16, behaviour("0.33.0").event_encoding), 0)
    ext = [vllm_hash.to_external(bytes([i]) * 32) for i in range(1, 4)]
    assert msgpack.unpackb(payload) == [1.5, [
        {"type": "AllBlocksCleared"},
        {"type": "BlockRemoved", "block_hashes": [ext[2]], "medium": "GPU", "group_idx": 0},
        {"type": "BlockStored", "block_hashes": [ext[0], ext[1]], "parent_block_hash": None,
         "token_ids": list(range(32)), "block_size": 16, "lora_id": None, "medium": "GPU", "lora_name": None,
         "extra_keys": [None, None], "group_idx": 0, "kv_cache_spec_kind": "full_attention"},
    ], 0]


def test_0_33_events_publish_the_cache_salt_untagged() -> None:
    ev = KvEvents()
    h = bytes(32)
    ev.stored = [StoredBlocks([h], None, list(range(16)), [vllm_hash.cache_salt_extra_keys("s1", "0.33.0")])]
    (stored,) = msgpack.unpackb(encode_batch(0.0, encode_events(ev, 16, "map_tagged")))[1]
    assert stored["extra_keys"] == [["s1"]]  # to_event_extra_keys drops the "cache_salt" tag


def test_to_external_is_the_low_64_bits() -> None:
    h = bytes(range(32))
    assert vllm_hash.to_external(h) == int.from_bytes(h[-8:], "big")


def test_raw_digests_when_int_block_hashes_are_off() -> None:
    # VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0: maybe_convert_block_hash returns the digest itself
    (_, removed, stored) = msgpack.unpackb(encode_batch(0.0, encode_events(_events(), 16, "array_tagged", False)))[1]
    assert removed == ["BlockRemoved", [bytes([3]) * 32], "GPU"]
    assert stored[1] == [bytes([1]) * 32, bytes([2]) * 32]
