"""What the mock worker does differently per emulated vLLM version: one table.

Each row is read from vLLM's own source at that release tag (paths relative to the
``vllm/`` package); the mock's behaviour follows the row for ``--mock-vllm-version``,
and nothing else in the worker compares version strings.

- ``hash_algos`` / default ``sha256``: ``config/cache.py`` (``PrefixCachingHashAlgo``,
  ``prefix_caching_hash_algo``); the functions: 0.11 ``utils/__init__.py``
  (``sha256``, ``sha256_cbor``, ``get_hash_fn_by_name``), 0.33 ``utils/hashing.py``
  (adds ``xxhash``, ``xxhash_cbor``).
- ``none_hash_rule``: ``v1/core/kv_cache_utils.py`` ``init_none_hash``. 0.11:
  ``hash_fn(PYTHONHASHSEED)`` when set, else ``os.urandom(32)`` whatever the algorithm.
  0.33 (``resolve_none_hash_seed``): PYTHONHASHSEED when set, else the fixed
  ``"vllm-none-hash"`` for sha256/sha256_cbor and a random seed for xxhash/xxhash_cbor.
- ``lora_extra_key`` / ``cache_salt_extra_key``: ``v1/core/kv_cache_utils.py``
  ``_gen_lora_extra_hash_keys`` and ``generate_block_hash_extra_keys`` (0.11: the bare
  LoRA int id / salt; 0.33: tagged ``("lora", name, path)`` / ``("cache_salt", salt)``).
- ``event_encoding``: ``distributed/kv_events.py``. 0.11: every event a msgspec struct
  with ``array_like=True, tag=True`` (``["BlockStored", hashes, parent, tokens,
  block_size, lora_id, medium]``); 0.33: events are tagged maps (no ``array_like``),
  with ``lora_name``, ``extra_keys``, ``group_idx``, ``kv_cache_spec_kind`` and more,
  ``omit_defaults=True``. The batch is ``[ts, events, data_parallel_rank]`` in both.
- ``nixl_remote_request_id`` / ``internal_request_id_suffix``: 0.11
  ``distributed/kv_transfer/kv_connector/v1/nixl_connector.py`` returns no request id
  in ``kv_transfer_params``; the decode side notifies the prefill side with *its own*
  request id (``f"{request_id}:{tp_ratio}"``), so P and D pair only when both got the
  same id (the proxy sends one ``X-Request-Id`` to both). 0.33
  ``.../v1/nixl/metadata.py`` (NIXL_CONNECTOR_VERSION history, "2: Add
  remote_request_id to kv_transfer_params") and ``.../nixl/pull_scheduler.py``: P sends
  ``remote_request_id`` = its internal id, which ``v1/engine/input_processor.py``
  ``assign_request_id`` makes unique with 8 random characters, and D notifies with it;
  params without it are "invalid KVTransferParams" and no transfer happens.
- ``kv_lease_s`` / ``side_channel_port``: 0.11 ``envs.py``
  (``VLLM_NIXL_ABORT_REQUEST_TIMEOUT`` = 120, ``VLLM_NIXL_SIDE_CHANNEL_PORT`` = 5557);
  0.33 ``.../nixl/base_scheduler.py`` (``kv_lease_duration`` extra config, 30 s) and
  ``envs.py`` (side channel port 5600).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pdserve.api import vllm_versions

NoneHashRule = Literal["seed_env_else_random", "seed_env_else_fixed_for_crypto"]
EventEncoding = Literal["array_tagged", "map_tagged"]


@dataclass(frozen=True)
class VllmBehaviour:
    version: str
    hash_algos: tuple[str, ...]
    none_hash_rule: NoneHashRule
    lora_extra_key: Literal["int_id", "tagged_name_path"]
    cache_salt_extra_key: Literal["bare", "tagged"]
    event_encoding: EventEncoding
    nixl_remote_request_id: bool
    internal_request_id_suffix: bool
    kv_lease_s: float
    kv_lease_source: Literal["env:VLLM_NIXL_ABORT_REQUEST_TIMEOUT", "extra_config:kv_lease_duration"]
    side_channel_port: int
    default_hash_algo: str = "sha256"
    # The chat message's reasoning field: `reasoning_content` in 0.11
    # (entrypoints/openai/protocol.py ChatMessage), `reasoning` in 0.33
    # (entrypoints/openai/chat_completion/protocol.py ChatMessage); found by the conformance tier.
    chat_reasoning_field: Literal["reasoning_content", "reasoning"] = "reasoning"
    # v1/core/block_pool.py free_blocks: 0.33 prepends freed blocks without a hash to the free queue (reused
    # before any cached block is evicted); 0.11 appends every freed block to the tail (EngineConfig.free_uncached_first)
    free_uncached_first: bool = True


# Fixed NONE_HASH seed of 0.33 for cryptographic algorithms (kv_cache_utils.DEFAULT_NONE_HASH_SEED).
DEFAULT_NONE_HASH_SEED = "vllm-none-hash"
CRYPTO_HASH_ALGOS = frozenset({"sha256", "sha256_cbor"})

VERSIONS: dict[str, VllmBehaviour] = {
    "0.11.0": VllmBehaviour(
        version="0.11.0", hash_algos=("sha256", "sha256_cbor"), none_hash_rule="seed_env_else_random",
        lora_extra_key="int_id", cache_salt_extra_key="bare", event_encoding="array_tagged",
        nixl_remote_request_id=False, internal_request_id_suffix=False,
        kv_lease_s=120.0, kv_lease_source="env:VLLM_NIXL_ABORT_REQUEST_TIMEOUT", side_channel_port=5557,
        chat_reasoning_field="reasoning_content", free_uncached_first=False),
    "0.33.0": VllmBehaviour(
        version="0.33.0", hash_algos=("sha256", "sha256_cbor", "xxhash", "xxhash_cbor"),
        none_hash_rule="seed_env_else_fixed_for_crypto", lora_extra_key="tagged_name_path",
        cache_salt_extra_key="tagged", event_encoding="map_tagged",
        nixl_remote_request_id=True, internal_request_id_suffix=True,
        kv_lease_s=30.0, kv_lease_source="extra_config:kv_lease_duration", side_channel_port=5600,
        chat_reasoning_field="reasoning"),
}
# The supported list and the default come from the operator's version table (pdserve.api.vllm_versions);
# this table adds the engine behaviour the mock emulates and must cover every supported version.
CURRENT_VERSION: str = vllm_versions.DEFAULT_VERSION
assert set(VERSIONS) == set(vllm_versions.VERSIONS), "the mock must emulate every supported vLLM version"


def behaviour(version: str) -> VllmBehaviour:
    try:
        return VERSIONS[version]
    except KeyError:
        raise ValueError(f"unsupported vLLM version {version!r}; the mock emulates {', '.join(VERSIONS)}") from None
