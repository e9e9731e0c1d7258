"""The supported vLLM versions: one table that rendering, the CRD's CEL rules and the docs read.

Every entry was read off vLLM's own source at that release (the ``vllm`` wheel from
PyPI; paths below are inside the wheel), not from our code:

- connectors: ``vllm/distributed/kv_transfer/kv_connector/factory.py``
  (``KVConnectorFactory.register_connector`` calls). 0.11.0 registers
  SharedStorage, P2pNccl, LMCacheConnectorV1, Nixl, Multi and Offloading; MooncakeConnector
  first appears later (0.33.0 registers it, plus MoRIIO, NixlPull/Push and others).
- NIXL protocol: 0.11.0 has no ``NIXL_CONNECTOR_VERSION`` (``nixl_connector.py``);
  0.33.0 has ``NIXL_CONNECTOR_VERSION = 15`` (``v1/nixl/metadata.py``; v2 added
  ``remote_request_id`` to kv_transfer_params).
- TP between pools: 0.11.0 ``nixl_connector.py`` ``add_remote_agent`` computes
  ``divide(local_tp, remote_tp)`` (``vllm/distributed/utils.py``: asserts divisibility) and
  asserts "Decode TP cannot be smaller than prefill TP"; 0.33.0
  ``kv_connector/utils.py`` ``TransferTopology.tp_ratio`` accepts either direction as long as
  one size divides the other (``v1/nixl/tp_mapping.py`` reads from several prefill ranks).
- side-channel ports: 0.11.0 each TP rank listens on ``VLLM_NIXL_SIDE_CHANNEL_PORT +
  tp_rank`` (``nixl_connector.py``, "Each TP rank listens/queries on the base_port +
  tp_rank"); 0.33.0 serves every rank's metadata from one scheduler socket on the base
  port (``v1/nixl/base_scheduler.py``, ``side_channel_port = port + data_parallel_index``).
- ``--tokenizer-mode`` choices: ``TokenizerMode`` in ``vllm/config/model.py``;
  ``--block-size`` choices: ``BlockSize`` in 0.11.0 ``vllm/config/cache.py`` (1..128 powers),
  any positive int in 0.33.0 (``block_size: int = Field(default=None, gt=0)``).
- Mooncake: prefill ``kv_producer``, decode ``kv_consumer``, bootstrap port from
  ``VLLM_MOONCAKE_BOOTSTRAP_PORT`` (0.33.0 ``vllm/envs.py``, docs/features/mooncake_connector_usage.md).
  LMCache P/D uses producer/consumer roles too (vLLM's
  examples/others/lmcache/disagg_prefill_lmcache_v1/disagg_vllm_launcher.sh).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

TpRule = Literal["decode_multiple_of_prefill", "either_divides"]

# The pdserve-offered KV connectors. P2pNcclConnector (0.11 only) needs vLLM's own proxy
# for its NCCL rendezvous and MoRIIO targets AMD GPUs: vLLM has them, pdserve does not render them.
OFFERED_CONNECTORS = ("NixlConnector", "LMCacheConnectorV1", "MooncakeConnector")
# Tokenizer modes the router can load as vLLM does (HF tokenizers or mistral-common).
OFFERED_TOKENIZER_MODES = ("auto", "hf", "slow", "mistral")


@dataclass(frozen=True)
class Connector:
    """How one KV connector is configured in one vLLM version."""

    name: str
    prefill_role: str
    decode_role: str
    # Env var carrying the handshake / bootstrap port, and whether each TP rank takes its own port.
    port_env: str
    port_per_tp_rank: bool


@dataclass(frozen=True)
class VllmVersion:
    version: str
    image: str
    # Every connector name this release's factory registers (for the docs' table).
    registered_connectors: tuple[str, ...]
    # The ones pdserve renders for this release, by name.
    connectors: dict[str, Connector]
    nixl_protocol_version: int | None
    nixl_tp_rule: TpRule
    tokenizer_modes: tuple[str, ...]
    block_sizes: tuple[int, ...] | None  # None: any positive integer
    # Version-specific extra `vllm serve` flags and env (rendered for both pools).
    extra_args: tuple[str, ...] = ()
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def decode_tp_must_cover_prefill(self) -> bool:
        return self.nixl_tp_rule == "decode_multiple_of_prefill"

    def tp_ok(self, prefill_tp: int, decode_tp: int) -> bool:
        if self.nixl_tp_rule == "decode_multiple_of_prefill":
            return decode_tp % prefill_tp == 0
        return decode_tp % prefill_tp == 0 or prefill_tp % decode_tp == 0

    def side_channel_ports(self, connector: str, port: int, prefill_tp: int, decode_tp: int) -> range:
        """Ports the workers of either pool listen on for the connector's handshake."""
        span = max(prefill_tp, decode_tp) if self.connectors[connector].port_per_tp_rank else 1
        return range(port, port + span)


_NIXL_011 = Connector("NixlConnector", "kv_both", "kv_both", "VLLM_NIXL_SIDE_CHANNEL_PORT", port_per_tp_rank=True)
_NIXL_033 = Connector("NixlConnector", "kv_both", "kv_both", "VLLM_NIXL_SIDE_CHANNEL_PORT", port_per_tp_rank=False)
# LMCache moves KV through its own server (LMCACHE_CONFIG_FILE); the port env is unused by it
# but NIXL's is still rendered, so it is the one checked.
_LMCACHE_011 = Connector("LMCacheConnectorV1", "kv_producer", "kv_consumer", "VLLM_NIXL_SIDE_CHANNEL_PORT", port_per_tp_rank=True)
_LMCACHE_033 = Connector("LMCacheConnectorV1", "kv_producer", "kv_consumer", "VLLM_NIXL_SIDE_CHANNEL_PORT", port_per_tp_rank=False)
# 0.33 mooncake_connector.py get_mooncake_side_channel_port: port + dp_index * tp_size (one port at DP 1).
_MOONCAKE_033 = Connector("MooncakeConnector", "kv_producer", "kv_consumer", "VLLM_MOONCAKE_BOOTSTRAP_PORT", port_per_tp_rank=False)

VERSIONS: dict[str, VllmVersion] = {
    "0.11.0": VllmVersion(
        version="0.11.0",
        image="vllm/vllm-openai:v0.11.0",
        registered_connectors=("SharedStorageConnector", "P2pNcclConnector", "LMCacheConnectorV1", "NixlConnector", "MultiConnector", "OffloadingConnector"),
        connectors={c.name: c for c in (_NIXL_011, _LMCACHE_011)},
        nixl_protocol_version=None,
        nixl_tp_rule="decode_multiple_of_prefill",
        tokenizer_modes=("auto", "slow", "mistral"),
        block_sizes=(1, 8, 16, 32, 64, 128),
    ),
    "0.33.0": VllmVersion(
        version="0.33.0",
        image="vllm/vllm-openai:v0.33.0",
        registered_connectors=(
            "ExampleConnector",
            "ExampleHiddenStatesConnector",
            "LMCacheConnectorV1",
            "LMCacheMPConnector",
            "NixlConnector",
            "NixlPullConnector",
            "NixlPushConnector",
            "MultiConnector",
            "HiSparseConnector",
            "MoRIIOConnector",
            "OffloadingConnector",
            "DecodeBenchConnector",
            "MooncakeConnector",
            "MooncakeStoreConnector",
            "FlexKVConnectorV1",
            "SimpleCPUOffloadConnector",
            "HF3FSKVConnector",
        ),
        connectors={c.name: c for c in (_NIXL_033, _LMCACHE_033, _MOONCAKE_033)},
        nixl_protocol_version=15,
        nixl_tp_rule="either_divides",
        tokenizer_modes=("auto", "hf", "mistral"),
        block_sizes=None,
    ),
}
VersionName = Literal["0.11.0", "0.33.0"]
DEFAULT_VERSION: VersionName = "0.33.0"


def get(version: str) -> VllmVersion:
    return VERSIONS[version]


def cel_list(values: Sequence[object]) -> str:
    return "[" + ", ".join(f"'{v}'" if isinstance(v, str) else str(v) for v in values) + "]"


def per_version_cel(version_expr: str, check: Mapping[str, str]) -> str:
    """A CEL expression that is ``check[v]`` for the version named by ``version_expr``."""
    return " || ".join(f"({version_expr} == '{v}' && ({expr}))" for v, expr in check.items())


def cel_in(value_expr: str, per_version: Mapping[str, Sequence[object] | None]) -> dict[str, str]:
    return {v: "true" if allowed is None else f"{value_expr} in {cel_list(allowed)}" for v, allowed in per_version.items()}


TABLE_BEGIN = "<!-- vllm-versions:begin (generated by `make crds` from pdserve.api.vllm_versions) -->"
TABLE_END = "<!-- vllm-versions:end -->"
_TP_TEXT: dict[TpRule, str] = {
    "decode_multiple_of_prefill": "decode TP a multiple of prefill TP (so decode >= prefill)",
    "either_divides": "either may be larger; one must divide the other",
}


def markdown_table() -> str:
    """The supported-version table for docs/install.md, between its markers."""
    rows = [
        TABLE_BEGIN,
        "",
        "| vLLM | default image | connectors pdserve renders (prefill / decode `kv_role`) | NIXL protocol | prefill vs decode TP (NIXL) | handshake ports | `--tokenizer-mode` (of those the router loads) | `--block-size` (vLLM's parser) | other connectors vLLM has |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for v, info in VERSIONS.items():
        conns = "<br>".join(f"{c.name} ({c.prefill_role} / {c.decode_role}, `{c.port_env}`)" for c in info.connectors.values())
        per_rank = any(c.port_per_tp_rank for c in info.connectors.values())
        ports = "port .. port+TP-1 (one per TP rank)" if per_rank else "port (one per engine)"
        others = ", ".join(c for c in info.registered_connectors if c not in info.connectors)
        sizes = ", ".join(map(str, info.block_sizes)) if info.block_sizes else "any >= 1 (the CRD caps it at 1024)"
        proto = str(info.nixl_protocol_version) if info.nixl_protocol_version is not None else "unversioned"
        default = " (default)" if v == DEFAULT_VERSION else ""
        rows.append(
            f"| {v}{default} | `{info.image}` | {conns} | {proto} | {_TP_TEXT[info.nixl_tp_rule]} | {ports} | {', '.join(info.tokenizer_modes)} | {sizes} | {others} |"
        )
    return "\n".join([*rows, "", TABLE_END])


def with_table(doc: str) -> str:
    """``doc`` with the text between the markers replaced by the current table."""
    start, end = doc.index(TABLE_BEGIN), doc.index(TABLE_END) + len(TABLE_END)
    return doc[:start] + markdown_table() + doc[end:]
