"""Prefix-cache block hashes: vLLM's own functions against the mock worker's, for the same
tokens, algorithm, version, PYTHONHASHSEED and cache_salt; and the mock's default algorithm
and NONE_HASH seed rule against vLLM's.

Judge: ``vllm/v1/core/kv_cache_utils.py`` (``init_none_hash``, ``get_request_block_hasher``
run by a real ``vllm.v1.request.Request``, ``maybe_convert_block_hash``), hash functions from
``get_hash_fn_by_name``, the default from ``vllm/config/cache.py``.
"""

from __future__ import annotations

import itertools

import pytest

from pdserve.api.vllm_versions import VERSIONS
from pdserve.worker import vllm_hash
from pdserve.worker.vllm_emulation import behaviour
from tests.conformance.conftest import Counts
from tests.conformance.vllm_env import run_probe

TOKENS = [(i * 7919 + 13) % 128_000 for i in range(16 * 5 + 3)]
SEEDS = ("0", "12345", None)


def _algos(version: str) -> list[str]:
    # xxhash needs the optional `xxhash` package on both sides; the vLLM venvs do not carry it.
    return [a for a in behaviour(version).hash_algos if not a.startswith("xxhash")]


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_block_hashes_equal_vllms(version: str, counts: Counts) -> None:
    cases = [{"algo": a, "seed_env": s, "token_ids": TOKENS[:n], "block_size": bs, "cache_salt": salt}
             for a, s, (n, bs), salt in itertools.product(_algos(version), SEEDS, ((83, 16), (83, 64), (64, 16), (15, 16)),
                                                          (None, "tenant-7"))]
    answer = run_probe(version, "hashing.py", {"cases": cases})
    assert behaviour(version).default_hash_algo == answer["default_algo"], "the mock's default algorithm is not vLLM's"
    compared = 0
    for case, res in zip(cases, answer["results"], strict=True):
        what = f"vLLM {version} {case['algo']} PYTHONHASHSEED={case['seed_env']} bs={case['block_size']} salt={case['cache_salt']}"
        reproducible = vllm_hash.is_reproducible(case["algo"], version, case["seed_env"])
        assert reproducible == res["root_reproducible"], f"{what}: NONE_HASH seed rule differs"
        assert vllm_hash.none_hash_seed(case["algo"], version, case["seed_env"]) is not None or not reproducible
        if not reproducible:
            continue  # random roots: nothing to compare but the rule itself
        assert vllm_hash.none_hash(case["algo"], version, case["seed_env"]).hex() == res["none_hash"], what
        extra = vllm_hash.cache_salt_extra_keys(case["cache_salt"], version)
        ours = vllm_hash.block_hashes(case["token_ids"], case["block_size"], case["algo"], version, case["seed_env"], extra)
        assert [h.hex() for h in ours] == res["hashes"], what
        assert [vllm_hash.to_external(h) for h in ours] == res["external"], what
        compared += len(ours) or 1
    counts.add("block hashes from vLLM's kv_cache_utils equal the mock's", version, compared)
