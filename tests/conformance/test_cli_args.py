"""Every rendered `vllm serve` command line parses with vLLM's own CLI, per supported version,
and vLLM reads from it what the operator meant (TP, block size, connector, role, events).

Judge: ``vllm/entrypoints/cli/serve.py`` (``ServeSubcommand``: ``make_arg_parser`` on vLLM's
``FlexibleArgumentParser``, ``validate_parsed_serve_args``), ``vllm/engine/arg_utils.py``
(``AsyncEngineArgs.from_cli_args``, ``create_engine_config``: ModelConfig, CacheConfig,
ParallelConfig, KVTransferConfig, KVEventsConfig) on vLLM's CPU platform, with the hub model
swapped for a local tiny Llama directory after parsing.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from pdserve.api import DisaggregatedService
from pdserve.api.vllm_versions import VERSIONS
from pdserve.operator.names import HTTP_PORT, KV_EVENTS_PORT
from pdserve.operator.render import render
from tests.conformance.conftest import Counts
from tests.conformance.fixtures import build_model_dir
from tests.conformance.vllm_env import run_probe

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TP_PAIRS = ((1, 1), (1, 2), (2, 1), (2, 2), (2, 4), (4, 2))


def _svc(version: str, connector: str, prefill_tp: int, decode_tp: int, mode: str,
         traces: str | None = None) -> DisaggregatedService:
    body: dict[str, Any] = {
        "apiVersion": "pdserve.io/v1alpha1",
        "kind": "DisaggregatedService",
        "metadata": {"name": "m", "namespace": "llm", "uid": "u-1"},
        "spec": {
            "model": {"name": "org/model", "servedName": "served", "tokenizerMode": mode},
            "engine": {"vllmVersion": version, "args": ["--max-model-len", "4096"]},
            "kvConnector": {"type": connector},
            "prefill": {"tensorParallelSize": prefill_tp, "extraArgs": ["--max-num-batched-tokens", "8192"]},
            "decode": {"tensorParallelSize": decode_tp, "extraArgs": ["--max-num-seqs", "64"]},
        },
    }
    if traces:
        body["spec"]["tracing"] = {"otlpTracesEndpoint": traces}
    return DisaggregatedService.from_body(body)


def _examples(version: str) -> list[DisaggregatedService]:
    """The committed examples that run real vLLM of this version."""
    out = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "DisaggregatedService" and doc["spec"].get("engine", {}).get("kind") == "vllm":
                doc["metadata"].update(namespace="llm", uid="u-1")
                svc = DisaggregatedService.from_body(doc)
                if svc.spec.engine.vllm_version == version:
                    out.append(svc)
    return out


def cases(version: str) -> list[tuple[DisaggregatedService, str, list[str]]]:
    """(service, role, argv after `vllm serve`) for every connector, TP pairing and tokenizer
    mode the version table admits (the CRD refuses the rest: tested in tests/api), and the
    examples/ that run this version."""
    info = VERSIONS[version]
    out = []
    modes = [m for m in info.tokenizer_modes if m != "mistral"]  # mistral needs a mistral model dir
    services = [_svc(version, connector, ptp, dtp, mode)
                for connector, (ptp, dtp), mode in itertools.product(info.connectors, TP_PAIRS, modes)
                if info.tp_ok(ptp, dtp)]
    # Tracing on: the workers get vLLM's --otlp-traces-endpoint, which vLLM checks OpenTelemetry for.
    services.append(_svc(version, next(iter(info.connectors)), 1, 1, modes[0], traces="http://otel-collector.observability:4318"))
    for svc in services + _examples(version):
        name = svc.metadata.name
        for m in render(svc):
            if m["kind"] != "Deployment" or m["metadata"]["name"] not in (f"{name}-prefill", f"{name}-decode"):
                continue
            c = m["spec"]["template"]["spec"]["containers"][0]
            assert c["command"] == ["vllm", "serve"], c["command"]
            out.append((svc, m["metadata"]["name"].removeprefix(f"{name}-"), list(c["args"])))
    return out


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_rendered_serve_args_parse_with_vllm(version: str, tmp_path: Path, counts: Counts) -> None:
    rendered = cases(version)
    model_dir = build_model_dir(tmp_path / "model")
    # Negative control: a command line vLLM must refuse (the judge can fail).
    control = [a.replace('"kv_role":"kv_both"', '"kv_role":"kv_sideways"') for a in rendered[0][2]]
    assert control != rendered[0][2]
    answer = run_probe(version, "cli_args.py", {"argvs": [a for _, _, a in rendered] + [control], "model_dir": str(model_dir)})
    assert answer["platform"] == "CpuPlatform"
    assert answer["results"].pop()["stage"] != "done", "vLLM accepted kv_role kv_sideways"
    failures = []
    for (svc, role, argv), res in zip(rendered, answer["results"], strict=True):
        spec = svc.spec
        pool = spec.prefill if role == "prefill" else spec.decode
        conn = spec.engine.version.connectors[spec.kv_connector.type]
        where = f"{role} {spec.kv_connector.type} TP {spec.prefill.tensor_parallel_size}/{spec.decode.tensor_parallel_size}"
        if res["stage"] != "done":
            failures.append(f"{where}: vLLM {version} stopped at {res['stage']}: {res.get('error')}\n  argv: {argv}")
            continue
        v = res["values"]
        want = {
            "tensor_parallel_size": pool.tensor_parallel_size,
            "block_size": spec.engine.block_size,
            "enable_prefix_caching": True,
            "served_model_name": [spec.served_name],
            "port": HTTP_PORT,
            "tokenizer_mode": spec.model.tokenizer_mode,
        }
        got = {k: v[k] for k in want}
        if got != want:
            failures.append(f"{where}: vLLM read {got}, operator meant {want}")
        ktc = res["kv_transfer_config"]
        want_role = conn.prefill_role if role == "prefill" else conn.decode_role
        if (ktc["kv_connector"], ktc["kv_role"]) != (spec.kv_connector.type, want_role):
            failures.append(f"{where}: kv_transfer_config read as {ktc['kv_connector']}/{ktc['kv_role']}")
        kec = res["kv_events_config"]
        if (kec["enable_kv_cache_events"], kec["publisher"], kec["endpoint"]) != (True, "zmq", f"tcp://*:{KV_EVENTS_PORT}"):
            failures.append(f"{where}: kv_events_config read as {json.dumps(kec)}")
        ec = res["engine_config"]
        if (ec["tensor_parallel_size"], ec["block_size"], ec["kv_connector"], ec["kv_role"]) != (
                pool.tensor_parallel_size, spec.engine.block_size, spec.kv_connector.type, want_role):
            failures.append(f"{where}: VllmConfig built as {ec}")
        if ec["otlp_traces_endpoint"] != spec.tracing.traces_url:
            failures.append(f"{where}: otlp_traces_endpoint read as {ec['otlp_traces_endpoint']!r}, "
                            f"operator meant {spec.tracing.traces_url!r}")
    counts.add("vllm serve command lines parsed and built into VllmConfig", version, len(rendered), len(failures))
    assert not failures, f"{len(failures)} of {len(rendered)} rendered command lines:\n" + "\n".join(failures)
