"""pdserve.api.vllm_versions against each release's own code: the connectors it registers, its
--tokenizer-mode and --block-size choices, its NIXL protocol version, the env vars rendered."""

from __future__ import annotations

import pytest

from pdserve.api.vllm_versions import VERSIONS
from tests.conformance.conftest import Counts
from tests.conformance.vllm_env import run_probe


CHECK = "supported-version table (connectors, tokenizer modes, block sizes, NIXL version, env vars) matches vLLM"


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_version_table_matches_vllm(version: str, counts: Counts) -> None:
    info = VERSIONS[version]
    port_envs = sorted({c.port_env for c in info.connectors.values()} | {"VLLM_NIXL_SIDE_CHANNEL_HOST", *info.extra_env})
    answer = run_probe(version, "version_table.py", {"env": port_envs})
    facts = {
        "registered connectors": (sorted(info.registered_connectors), answer["connectors"]),
        "offered connectors registered": (True, set(info.connectors) <= set(answer["connectors"])),
        "tokenizer modes accepted": (True, set(info.tokenizer_modes) <= set(answer["tokenizer_modes"])),
        "block sizes": (list(info.block_sizes) if info.block_sizes is not None else None, answer["block_sizes"]),
        "NIXL protocol version": (info.nixl_protocol_version, answer["nixl_protocol_version"]),
        "rendered env vars exist": ({e: True for e in port_envs}, answer["env"]),
    }
    wrong = {k: v for k, v in facts.items() if v[0] != v[1]}
    counts.add(CHECK, version, len(facts), len(wrong))
    assert not wrong, f"pdserve.api.vllm_versions disagrees with vLLM {version} (pdserve, vLLM): {wrong}"
