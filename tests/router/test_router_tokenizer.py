"""The router's tokenizer: the model's, loaded at start-up; a missing one refuses to
start unless the approximate fallback is asked for, which is then visible."""

from __future__ import annotations

from contextlib import ExitStack

import pytest

from pdserve.router.shell.state import RouterState
from pdserve.tokenization.testing import build_bpe_tokenizer
from tests.router.conftest import MODEL, metric_sum, router_config, run_router, spawn


def test_state_loads_the_configured_tokenizer(tmp_path) -> None:
    d = build_bpe_tokenizer(tmp_path)
    st = RouterState(router_config(decode=["http://d:1"], tokenizer=str(d), tokenizer_mode="auto"))
    assert st.tokenizer.mode == "auto" and st.tokenizer.name == str(d)
    assert st.decode_policy.name == "kv_aware" and st.cfg.migrate


def test_unloadable_tokenizer_is_a_startup_error_naming_it(tmp_path) -> None:
    with pytest.raises(ValueError, match=r"cannot load tokenizer .*missing.*--tokenizer-fallback approx"):
        RouterState(router_config(decode=["http://d:1"], tokenizer=str(tmp_path / "missing"), tokenizer_mode="auto"))


async def test_fallback_is_opt_in_and_visible(tmp_path) -> None:
    with ExitStack() as stack:
        (w,) = spawn(stack, 1, pd=False, events=False)
        cfg = router_config(decode=[w.url], tokenizer=str(tmp_path / "missing"), tokenizer_mode="auto",
                            tokenizer_fallback="approx")
        async with run_router(cfg) as r:
            assert r.state.decode_policy.name == "prefix_approx" and not r.state.cfg.migrate
            resp = await r.post("/v1/completions", {"model": MODEL, "prompt": "hello there", "max_tokens": 2})
            assert resp.status == 200 and "policy=prefix_approx" in resp.headers["x-pdserve-route"]
            async with r.session.get(r.url + "/metrics") as m:
                assert metric_sum(await m.text(), "pdserve_router_tokenizer_fallback") == 1


def test_chat_preprocessing_follows_the_workers_vllm_version(tmp_path) -> None:
    import json

    from pdserve.router.shell.cli import build_parser, config_from_args
    from pdserve.router.core.requests import parse_request

    d = build_bpe_tokenizer(tmp_path)
    body = json.dumps({"messages": [{"role": "developer", "content": "Rules."}, {"role": "user", "content": "q"}],
                       "add_special_tokens": True}).encode()
    ids = {}
    for version in ("0.11.0", "0.33.0"):
        args = build_parser().parse_args(["--decode", "http://d:1", "--tokenizer", str(d), "--vllm-version", version])
        st = RouterState(config_from_args(args))
        assert st.tokenizer.rules.version == version  # type: ignore[attr-defined]
        ids[version] = parse_request(body, "chat", st.tokenizer).prompt_ids
    tok = st.tokenizer
    # 0.11: developer role as is; 0.33: developer -> system. In both the request's
    # add_special_tokens adds a second BOS (vLLM's own renderers: tests/conformance/test_token_ids.py).
    assert tok.decode(ids["0.33.0"], skip_special_tokens=False).startswith(
        "<|begin_of_text|><|begin_of_text|><|start_header_id|>system")
    assert tok.decode(ids["0.11.0"], skip_special_tokens=False).startswith(
        "<|begin_of_text|><|begin_of_text|><|start_header_id|>developer")
