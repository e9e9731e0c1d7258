"""``pdserve router`` as users run it: a real process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import ExitStack

import httpx

from tests.router.conftest import MODEL, spawn
from tests.router.test_resilience import dead_url


def run_cli(*args: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pdserve.cli", "router", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_bad_arguments_exit_2_with_a_clear_message() -> None:
    r = run_cli()
    assert r.returncode == 2 and "no workers" in r.stderr
    r = run_cli("--prefill", "http://127.0.0.1:1")
    assert r.returncode == 2 and "--prefill needs at least one --decode" in r.stderr
    r = run_cli("--decode", "ftp://x", "--tokenizer-mode", "mock")
    assert r.returncode == 2 and "http://host:port" in r.stderr
    r = run_cli("--decode", "http://127.0.0.1:1", "--policy", "magic")
    assert r.returncode == 2 and "unknown routing policy 'magic'; choose one of" in r.stderr
    r = run_cli("--decode", "http://127.0.0.1:1", "--cost-overlap-weight", "much", "--tokenizer-mode", "mock")
    assert r.returncode == 2 and "invalid float value: 'much'" in r.stderr
    r = run_cli("--decode", "http://127.0.0.1:1", "--cost-kv-full", "2", "--tokenizer-mode", "mock")
    assert r.returncode == 2 and "kv_full must be in (0, 1], got 2.0" in r.stderr


def test_a_router_without_the_models_tokenizer_does_not_start(tmp_path) -> None:
    r = run_cli("--decode", "http://127.0.0.1:1")
    assert r.returncode == 2 and "no tokenizer: give --tokenizer" in r.stderr
    r = run_cli("--decode", "http://127.0.0.1:1", "--tokenizer", str(tmp_path / "missing"))
    assert r.returncode == 2 and f"cannot load tokenizer '{tmp_path / 'missing'}'" in r.stderr
    assert "--tokenizer-fallback approx" in r.stderr


def test_weight_flags_reach_the_policies() -> None:
    from pdserve.router.shell.cli import build_parser, config_from_args
    from pdserve.router.shell.state import RouterState

    args = build_parser().parse_args(["--decode", "http://127.0.0.1:1", "--cost-overlap-weight", "3",
                                      "--cost-request-tokens", "10", "--policy", "kv-aware", "--tokenizer-mode", "mock"])
    state = RouterState(config_from_args(args))
    w = state.decode_policy.weights  # type: ignore[attr-defined]
    assert (w.overlap_weight, w.request_tokens, w.kv_tokens) == (3.0, 10.0, 2048.0)


def test_router_process_serves_and_stops_on_sigterm() -> None:
    with ExitStack() as stack:
        (w,) = spawn(stack, 1, speedup=200.0, pd=False, events=False)
        port = int(dead_url().rsplit(":", 1)[1])
        proc = subprocess.Popen([sys.executable, "-m", "pdserve.cli", "router", "--port", str(port), "--decode", w.url,
                                 "--policy", "least_loaded", "--tokenizer-mode", "mock"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                try:
                    if httpx.get(url + "/health", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.1)
            r = httpx.post(url + "/v1/completions", json={"model": MODEL, "prompt": "hi", "max_tokens": 2}, timeout=10)
            assert r.status_code == 200 and "policy=least_loaded" in r.headers["x-pdserve-route"]
            os.killpg(proc.pid, signal.SIGTERM)
            assert proc.wait(10) == 0
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
