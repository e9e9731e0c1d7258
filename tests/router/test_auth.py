"""--api-key as vLLM's: Bearer keys on /v1/*, /health and /metrics open, 401 {"error": "Unauthorized"}."""

from __future__ import annotations

from pdserve.router.shell.auth import ApiKeys, api_keys
from pdserve.router.shell.cli import build_parser, config_from_args
from tests.router.conftest import MODEL, router_config, run_router, spawn

BODY = {"model": MODEL, "prompt": "hello", "max_tokens": 2}


async def test_keys_guard_v1_only(worker_stack) -> None:
    (w,) = spawn(worker_stack, 1, speedup=100.0, pd=False, events=False)
    async with run_router(router_config(decode=[w.url], api_keys=["k-one", "k-two"], scrape_interval_s=60)) as r:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic k-one"},
                        {"Authorization": "k-one"}, {"Authorization": "Bearer "}):
            resp = await r.post("/v1/completions", BODY, headers=headers)
            assert resp.status == 401 and await resp.json() == {"error": "Unauthorized"}, headers
        for key in ("Bearer k-one", "bearer k-two"):  # either key; the scheme is case-insensitive
            resp = await r.post("/v1/completions", BODY, headers={"Authorization": key})
            assert resp.status == 200, await resp.text()
        async with r.session.get(r.url + "/v1/models") as resp:
            assert resp.status == 401
        async with r.session.post(r.url + "/v1/nowhere", json={}) as resp:
            assert resp.status == 401  # checked before routing, as vLLM's middleware
        for path in ("/health", "/metrics"):  # probes and Prometheus need no key
            async with r.session.get(r.url + path) as resp:
                assert resp.status == 200, path
        async with r.session.options(r.url + "/v1/completions") as resp:
            assert resp.status != 401


async def test_no_keys_no_check(worker_stack) -> None:
    (w,) = spawn(worker_stack, 1, speedup=100.0, pd=False, events=False)
    async with run_router(router_config(decode=[w.url], scrape_interval_s=60)) as r:
        assert (await r.post("/v1/completions", BODY)).status == 200


def test_flag_takes_precedence_over_the_environment() -> None:
    assert api_keys(["a", "b"], {"VLLM_API_KEY": "env"}) == ["a", "b"]
    assert api_keys(None, {"VLLM_API_KEY": "env"}) == ["env"]
    assert api_keys(None, {}) == [] and api_keys(None, {"VLLM_API_KEY": ""}) == []
    args = build_parser().parse_args(["--decode", "http://w:8000", "--tokenizer-mode", "mock", "--api-key", "x", "y"])
    assert config_from_args(args).api_keys == ["x", "y"]


def test_key_check_is_exact() -> None:
    keys = ApiKeys(["secret"])
    assert keys.verify("Bearer secret") and keys.verify("BEARER secret")
    assert not keys.verify("Bearer secret ") and not keys.verify("Bearer Secret") and not keys.verify(None)
    assert keys.needs_key("POST", "/v1/completions") and not keys.needs_key("OPTIONS", "/v1/completions")
    assert not keys.needs_key("GET", "/health") and not ApiKeys([]).needs_key("POST", "/v1/completions")
