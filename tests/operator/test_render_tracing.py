"""spec.tracing -> the router's and the workers' OpenTelemetry flags and environment."""

from __future__ import annotations

import pydantic
import pytest

from pdserve.operator.render import render
from pdserve.router.shell import cli as router_cli
from pdserve.worker import cli as worker_cli
from tests.operator.test_operator_render import _engine, _svc


def _env(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container["env"]}


def test_tracing_endpoint_reaches_router_and_both_pools() -> None:
    out = render(_svc("examples/mock-disagg.yaml", tracing={"otlpTracesEndpoint": "http://otel.obs:4318",
                                                            "sampleRatio": 0.1}))
    router = _engine(out, "mock-llama-router")
    cfg = router_cli.config_from_args(router_cli.build_parser().parse_args(router["args"]))
    assert (cfg.otlp_traces_endpoint, cfg.otlp_traces_sample_ratio) == ("http://otel.obs:4318/v1/traces", 0.1)
    for role in ("prefill", "decode"):
        c = _engine(out, f"mock-llama-{role}")
        args = worker_cli.build_parser().parse_args(c["args"])
        # vLLM's http/protobuf exporter takes the URL as is: the full /v1/traces path.
        assert args.otlp_traces_endpoint == "http://otel.obs:4318/v1/traces"
        env = _env(c)
        assert env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "http/protobuf"  # vLLM's default is grpc
        assert env["OTEL_SERVICE_NAME"] == f"mock-llama-{role}"
        assert (env["OTEL_TRACES_SAMPLER"], env["OTEL_TRACES_SAMPLER_ARG"]) == ("parentbased_traceidratio", "0.1")


def test_vllm_pools_get_vllms_flag_and_a_given_path_is_kept() -> None:
    out = render(_svc(tracing={"otlpTracesEndpoint": "https://collector.example/otlp/v1/traces"}))
    c = _engine(out, "llama-8b-decode")
    i = c["args"].index("--otlp-traces-endpoint")
    assert c["args"][i + 1] == "https://collector.example/otlp/v1/traces"
    assert c["command"] == ["vllm", "serve"]
    assert _env(c)["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "http/protobuf"


def test_no_tracing_by_default() -> None:
    out = render(_svc("examples/mock-disagg.yaml"))
    for name in ("mock-llama-router", "mock-llama-prefill", "mock-llama-decode"):
        c = _engine(out, name)
        assert not any("otlp" in a for a in c["args"]) and not any(k.startswith("OTEL_") for k in _env(c))


@pytest.mark.parametrize(("tracing", "message"), [({"otlpTracesEndpoint": "otel:4317"}, "should match pattern"),
                                                  ({"otlpTracesEndpoint": "http://"}, "should match pattern"),
                                                  ({"sampleRatio": 1.5}, "less than or equal to 1")])
def test_bad_tracing_spec_is_refused(tracing: dict, message: str) -> None:
    with pytest.raises(pydantic.ValidationError, match=message):
        _svc(tracing=tracing)
