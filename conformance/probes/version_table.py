"""What a vLLM release itself says about the facts pdserve's version table records.

Request: {} . Answer: the connector names its KVConnectorFactory registers, the
``TokenizerMode`` and ``BlockSize`` literals (None where block_size is a plain int),
NIXL_CONNECTOR_VERSION (None where the release has none) and the NIXL env defaults.
"""

from __future__ import annotations

import typing
from typing import Any

from common import main, use_cpu_platform


def _nixl_version() -> int | None:
    try:  # 0.33: v1/nixl/metadata.py
        from vllm.distributed.kv_transfer.kv_connector.v1.nixl.metadata import NIXL_CONNECTOR_VERSION

        return int(NIXL_CONNECTOR_VERSION)
    except ImportError:
        pass
    # 0.11: a single nixl_connector.py that imports the optional `nixl` package; read its source.
    import importlib.util

    spec = importlib.util.find_spec("vllm.distributed.kv_transfer.kv_connector.v1.nixl_connector")
    assert spec is not None and spec.origin is not None
    text = open(spec.origin).read()
    for line in text.splitlines():
        if line.startswith("NIXL_CONNECTOR_VERSION"):
            return int(line.split("=")[1].strip())
    return None


def handle(request: dict[str, Any]) -> dict[str, Any]:
    use_cpu_platform()
    import vllm.envs as envs
    from vllm.config import cache, model
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

    block_size = getattr(cache, "BlockSize", None)
    return {
        "connectors": sorted(KVConnectorFactory._registry),
        "tokenizer_modes": list(typing.get_args(model.TokenizerMode)),
        "block_sizes": list(typing.get_args(block_size)) if block_size is not None else None,
        "nixl_protocol_version": _nixl_version(),
        "env": {name: name in envs.environment_variables for name in request.get("env", [])},
    }


if __name__ == "__main__":
    main(handle)
