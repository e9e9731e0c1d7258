"""Prefix-cache block hashes computed by vLLM's own functions.

``vllm/v1/core/kv_cache_utils.py``: ``init_none_hash`` (NONE_HASH from PYTHONHASHSEED
by the version's rule), ``get_request_block_hasher`` run by a real ``vllm.v1.request.
Request`` (its extra keys: cache_salt), ``maybe_convert_block_hash``; hash functions by
name from ``get_hash_fn_by_name`` (0.11 ``vllm/utils/__init__.py``, 0.33
``vllm/utils/hashing.py``).
Request: {"cases": [{"algo", "seed_env" (str|null), "token_ids", "block_size", "cache_salt"}]}.
Answer per case: block hashes as hex digests, their 64-bit event form, and whether a
second ``init_none_hash`` gave the same NONE_HASH (False: vLLM seeds randomly).
"""

from __future__ import annotations

import inspect
import os
from typing import Any

from common import main, use_cpu_platform


def _hash_fn(name: str) -> Any:
    try:
        from vllm.utils.hashing import get_hash_fn_by_name  # 0.33
    except ImportError:
        from vllm.utils import get_hash_fn_by_name  # 0.11
    return get_hash_fn_by_name(name)


def one(case: dict[str, Any]) -> dict[str, Any]:
    from vllm import SamplingParams
    from vllm.v1.core import kv_cache_utils as kcu
    from vllm.v1.request import Request

    if case["seed_env"] is None:
        os.environ.pop("PYTHONHASHSEED", None)
    else:
        os.environ["PYTHONHASHSEED"] = case["seed_env"]
    fn = _hash_fn(case["algo"])
    kcu.init_none_hash(fn)
    first_root = kcu.NONE_HASH
    kw: dict[str, Any] = dict(request_id="conformance", prompt_token_ids=list(case["token_ids"]),
                              sampling_params=SamplingParams(max_tokens=1), pooling_params=None,
                              cache_salt=case.get("cache_salt"),
                              block_hasher=kcu.get_request_block_hasher(case["block_size"], fn))
    if "eos_token_id" in inspect.signature(Request.__init__).parameters:
        kw["eos_token_id"] = None
    req = Request(**kw)
    hashes = list(req.block_hashes)
    kcu.init_none_hash(fn)
    return {"hashes": [bytes(h).hex() for h in hashes],
            "external": [kcu.maybe_convert_block_hash(h) for h in hashes],
            "none_hash": bytes(first_root).hex(),
            "root_reproducible": kcu.NONE_HASH == first_root}


def handle(request: dict[str, Any]) -> dict[str, Any]:
    use_cpu_platform()
    os.environ["VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES"] = "1"
    from vllm.config.cache import CacheConfig

    default_algo = CacheConfig.__dataclass_fields__["prefix_caching_hash_algo"].default
    return {"default_algo": default_algo, "results": [one(c) for c in request["cases"]]}


if __name__ == "__main__":
    main(handle)
