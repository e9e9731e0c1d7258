"""Read decode-side ``kv_transfer_params`` as vLLM's NixlConnector does.

0.11: ``vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py``
``NixlConnectorMetadata.add_new_req(..., load_remote_cache=True)``; 0.33:
``.../v1/nixl/metadata.py`` ``NixlConnectorMetadata.add_new_req_to_recv`` (NIXL protocol
v2+: ``remote_request_id`` is read there and a KeyError without it).
Request: {"params": [kv_transfer_params, ...]}. Answer per params: what the connector's
metadata holds for the remote side (block ids, engine, request id, host, port, TP) or
the error it raised, plus the connector's protocol version where it has one.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from common import error_text, main, use_cpu_platform


def _reader() -> tuple[Any, str]:
    try:
        from vllm.distributed.kv_transfer.kv_connector.v1.nixl import metadata as m  # 0.33

        return m, "vllm/distributed/kv_transfer/kv_connector/v1/nixl/metadata.py"
    except ImportError:
        from vllm.distributed.kv_transfer.kv_connector.v1 import nixl_connector as m  # 0.11

        return m, "vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py"


def read(mod: Any, params: dict[str, Any]) -> dict[str, Any]:
    meta = mod.NixlConnectorMetadata()
    try:
        if hasattr(meta, "add_new_req_to_recv"):
            meta.add_new_req_to_recv("decode-req", [[7, 8, 9]], dict(params))
            req = meta.reqs_to_recv["decode-req"]
            r = req.remote
            return {"block_ids": r.block_ids, "engine_id": r.engine_id, "request_id": r.request_id,
                    "host": r.host, "port": r.port, "tp_size": req.tp_size}
        meta.add_new_req("decode-req", [7, 8, 9], dict(params), load_remote_cache=True)
        req = meta.reqs_to_recv["decode-req"]
        fields = {f.name for f in dataclasses.fields(req)}
        return {"block_ids": req.remote_block_ids, "engine_id": req.remote_engine_id,
                "request_id": getattr(req, "remote_request_id", None) if "remote_request_id" in fields else None,
                "host": req.remote_host, "port": req.remote_port, "tp_size": req.tp_size}
    except Exception as e:
        return {"error": error_text(e)}


def handle(request: dict[str, Any]) -> dict[str, Any]:
    use_cpu_platform()
    mod, path = _reader()
    return {"reader": path, "protocol_version": getattr(mod, "NIXL_CONNECTOR_VERSION", None),
            "results": [read(mod, p) for p in request["params"]]}


if __name__ == "__main__":
    main(handle)
