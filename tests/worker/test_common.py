"""The hash-word tokenizer (--tokenizer-mode mock) and vLLM's sha256_cbor block hashing, by hand."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdserve.tokenization import mock as tokenizer
from pdserve.worker import vllm_hash

# --prefix-caching-hash-algo sha256_cbor with PYTHONHASHSEED=0 (the same on 0.11 and 0.33)
CBOR0 = vllm_hash.BlockHasher("sha256_cbor", "0.33.0", "0")


def _manual_cbor_block(parent: bytes, tokens: list[int]) -> bytes:
    """CBOR of (parent, tuple(tokens), None) written by hand from RFC 8949 (small ints only)."""
    assert len(parent) == 32 and all(0 <= t < 24 for t in tokens) and len(tokens) < 24
    return (
        bytes([0x83])  # array(3)
        + bytes([0x58, 32]) + parent  # bstr, 1-byte length
        + bytes([0x80 + len(tokens)]) + bytes(tokens)  # array(n) of tiny uints
        + bytes([0xF6])  # null
    )


def test_none_hash_is_vllm_root_for_seed_zero() -> None:
    # vLLM: NONE_HASH = sha256_cbor(os.getenv("PYTHONHASHSEED")); CBOR text "0" = 0x61 0x30.
    expected = hashlib.sha256(bytes([0x61, 0x30])).digest()
    for version in ("0.11.0", "0.33.0"):
        assert vllm_hash.none_hash("sha256_cbor", version, "0") == expected
        assert vllm_hash.none_hash("sha256_cbor", version, "1234") != expected


def test_block_hash_matches_hand_encoded_cbor() -> None:
    tokens = [1, 2, 3, 4]
    expected = hashlib.sha256(_manual_cbor_block(CBOR0.root, tokens)).digest()
    assert CBOR0.hash_block(None, tokens) == expected
    child = CBOR0.hash_block(expected, [5, 6, 7, 8])
    assert child == hashlib.sha256(_manual_cbor_block(expected, [5, 6, 7, 8])).digest()
    assert CBOR0.block_hashes([1, 2, 3, 4, 5, 6, 7, 8, 9], 4) == [expected, child]


def test_block_hashes_skip_partial_block_and_chain() -> None:
    ids = list(range(100, 140))
    hs = CBOR0.block_hashes(ids, 16)
    assert len(hs) == 2
    # A different first block changes every later hash (chaining).
    ids2 = [0] + ids[1:]
    hs2 = CBOR0.block_hashes(ids2, 16)
    assert hs[0] != hs2[0] and hs[1] != hs2[1]
    assert CBOR0.block_hashes(ids[16:], 16, parent=hs[0]) == hs[1:]
    with pytest.raises(ValueError, match="block_size"):
        CBOR0.block_hashes(ids, 0)


def test_extra_keys_change_hash() -> None:
    assert CBOR0.hash_block(None, [1], ("lora",)) != CBOR0.hash_block(None, [1])


def test_to_external_is_last_8_bytes_big_endian() -> None:
    h = bytes(range(32))
    assert vllm_hash.to_external(h) == int.from_bytes(h[-8:], "big")
    assert 0 <= vllm_hash.to_external(CBOR0.root) < 2**64


def test_pythonhashseed_is_honoured_like_vllm() -> None:
    code = ("from pdserve.worker.vllm_hash import BlockHasher; "
            "print(BlockHasher.from_env('sha256_cbor', '0.33.0').root.hex())")
    env = dict(os.environ, PYTHONHASHSEED="42")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == vllm_hash.sha256_cbor("42").hex()


def test_tokenizer_roundtrip_and_stability() -> None:
    text = "Hello, world!  The model_name is llama-3.1 (8B).\n\nDone?"
    ids = tokenizer.encode(text)
    assert tokenizer.decode(ids) == text
    assert ids == tokenizer.encode(text)
    # Stable across processes: ids depend on text only.
    code = f"from pdserve.tokenization import mock; print(mock.encode({text!r}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(ids)
    assert all(0 <= t < tokenizer.VOCAB_SIZE for t in ids)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_tokenizer_roundtrip_property(text: str) -> None:
    assert tokenizer.decode(tokenizer.encode(text), skip_special_tokens=False) == text


def test_word_ids_decode_to_readable_words() -> None:
    text = tokenizer.decode(tokenizer.WORD_IDS[:5])
    assert text.split() == ["the", "of", "and", "to", "in"]
    assert tokenizer.decode([10**7]) == " <10000000>"


def test_chat_template() -> None:
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "Hi"}]}]
    prompt = tokenizer.apply_chat_template(msgs)
    assert prompt.startswith(tokenizer.BOS) and prompt.endswith("assistant<|end_header_id|>\n\n")
    ids = tokenizer.encode(prompt)
    assert ids[0] == tokenizer.BOS_ID and tokenizer.EOS_ID in ids
    assert tokenizer.decode(ids, skip_special_tokens=False) == prompt
    assert "Be brief." in tokenizer.decode(ids)
    with pytest.raises(ValueError, match=r"messages\[0\].role"):
        tokenizer.apply_chat_template([{"content": "x"}])
    with pytest.raises(ValueError, match="content"):
        tokenizer.apply_chat_template([{"role": "user", "content": 3}])


def test_matches_published_vllm_golden_vectors() -> None:
    """Vectors generated with vLLM v0.17.0's hash core (sha256_cbor) under PYTHONHASHSEED=0, published as
    loxilb-io/loxilb-inference-gateway cicd/common/kv_hash/fixtures/kv_hash_vectors.json."""
    assert CBOR0.root.hex() == "4e1195df020de59e0d65a33a4279f1183e7ae4e5d980e309f8b55adff2e61c3e"
    block0 = [101, 202, 303, 404, 505, 606, 707, 808, 909, 1010, 1111, 1212, 1313, 1414, 1515, 1616]
    block1 = [1717, 1818, 1919, 2020, 2121, 2222, 2323, 2424, 2525, 2626, 2727, 2828, 2929, 3030, 3131, 3232]
    h0, h1 = CBOR0.block_hashes(block0 + block1, 16)
    assert h0.hex() == "d450abdaf2c9ebdd0e0cbfbc4e24a5c07ff71dcab37be7426d4fa0e5fdb93342"
    assert [vllm_hash.to_external(h0), vllm_hash.to_external(h1)] == [7876691182959014722, 8769878286166771163]
    # the zero-parent vector pins the CBOR layout independently of NONE_HASH
    zero = CBOR0.hash_block(bytes(32), block0)
    assert vllm_hash.to_external(zero) == 14515664427994421226
