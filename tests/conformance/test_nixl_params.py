"""kv_transfer_params round trip, per NIXL protocol version: the mock prefill worker's answer,
through the router's decode-request rewrite (``pdserve.router.pd``), read by vLLM's
NixlConnector the way the decode engine reads it, then served by the mock decode worker.

Judge: 0.11 ``vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py``
(``NixlConnectorMetadata.add_new_req``); 0.33 ``.../v1/nixl/metadata.py``
(``add_new_req_to_recv``, NIXL_CONNECTOR_VERSION 15: ``remote_request_id`` required).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from pdserve.api.vllm_versions import VERSIONS
from pdserve.router.core import pd
from tests.conformance.conftest import Counts
from tests.conformance.pd_workers import MODEL, pd_pair
from tests.conformance.vllm_env import run_probe

PROMPT = "the model token cache and the river city music " * 8
BODIES = {
    "/v1/completions": {"model": MODEL, "prompt": PROMPT, "max_tokens": 6, "ignore_eos": True},
    "/v1/chat/completions": {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}],
                             "max_completion_tokens": 6, "ignore_eos": True},
}


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_kv_transfer_params_round_trip(version: str, counts: Counts) -> None:
    sent: list[dict[str, Any]] = []
    with pd_pair(version) as (p, d), httpx.Client(timeout=30) as http:
        for i, (path, body) in enumerate(BODIES.items()):
            rid = f"conf-{version}-{i}"
            r = http.post(p.url + path, json=pd.prefill_request(body), headers={"X-Request-Id": rid})
            assert r.status_code == 200, r.text
            params = r.json()["kv_transfer_params"]
            assert params and params["do_remote_prefill"] is True, params
            decode_body = pd.decode_request(body, params)
            sent.append(decode_body["kv_transfer_params"])
            r = http.post(d.url + path, json=decode_body, headers={"X-Request-Id": rid})
            assert r.status_code == 200, r.text
    # Negative control: without the request id, 0.33's reader must refuse (the judge can fail).
    stripped = {k: v for k, v in sent[0].items() if k != "remote_request_id"}
    answer = run_probe(version, "nixl.py", {"params": [*sent, stripped]})
    needs_request_id = VERSIONS[version].nixl_protocol_version is not None
    assert answer["protocol_version"] == VERSIONS[version].nixl_protocol_version, answer["reader"]
    for params, read in zip(sent, answer["results"], strict=False):
        assert "error" not in read, f"vLLM {version} ({answer['reader']}) refused {params}: {read['error']}"
        assert read["block_ids"] in (params["remote_block_ids"], [params["remote_block_ids"]])
        assert (read["engine_id"], read["host"], read["port"], read["tp_size"]) == (
            params["remote_engine_id"], params["remote_host"], params["remote_port"], params.get("tp_size", 1))
        if needs_request_id:
            assert read["request_id"] == params["remote_request_id"]
    control = answer["results"][-1]
    assert ("error" in control) == needs_request_id, control
    counts.add("kv_transfer_params (mock prefill -> router -> decode) read by vLLM's NixlConnector", version, len(sent))
