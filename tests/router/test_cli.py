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


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    # The timeout only catches a hang: importing the router costs ~1 CPU-second, which a CI machine at
    # load 20 on 2 cores stretches past 20 s.
    return subprocess.run([sys.executable, "-m", "pdserve.cli", "router", *args], capture_output=True, text=True,
                          timeout=180)


def cli_in_process(capsys, *args: str) -> tuple[int, str]:
    """``pdserve router ARGS`` run by the same ``main`` in this process: (exit code, stderr). The argument
    checks need no process of their own, only the one test below that the real command exits with 2."""
    from pdserve.cli import main

    try:
        code = main(["router", *args])
    except SystemExit as e:  # argparse's own errors
        code = int(e.code or 0)
    return code, capsys.readouterr().err


def test_bad_arguments_exit_2_with_a_clear_message(capsys) -> None:
    r = run_cli()
    assert r.returncode == 2 and "no workers" in r.stderr
    code, err = cli_in_process(capsys, "--prefill", "http://127.0.0.1:1")
    assert code == 2 and "--prefill needs at least one --decode" in err
    code, err = cli_in_process(capsys, "--decode", "ftp://x", "--tokenizer-mode", "mock")
    assert code == 2 and "http://host:port" in err
    code, err = cli_in_process(capsys, "--decode", "http://127.0.0.1:1", "--policy", "magic")
    assert code == 2 and "unknown routing policy 'magic'; choose one of" in err
    code, err = cli_in_process(capsys, "--decode", "http://127.0.0.1:1", "--cost-overlap-weight", "much",
                               "--tokenizer-mode", "mock")
    assert code == 2 and "invalid float value: 'much'" in err
    code, err = cli_in_process(capsys, "--decode", "http://127.0.0.1:1", "--cost-kv-full", "2",
                               "--tokenizer-mode", "mock")
    assert code == 2 and "kv_full must be in (0, 1], got 2.0" in err
    for processes in ("1", "2"):  # checked by the one process, and before the supervisor starts any
        code, err = cli_in_process(capsys, "--decode", "http://127.0.0.1:1", "--policy", "magic",
                                   "--processes", processes)
        assert code == 2 and "unknown routing policy 'magic'" in err, processes
        code, err = cli_in_process(capsys, "--decode", "ftp://x", "--tokenizer-mode", "mock",
                                   "--processes", processes)
        assert code == 2 and "http://host:port" in err and "processes on" not in err, processes


def test_a_router_without_the_models_tokenizer_does_not_start(tmp_path, capsys) -> None:
    code, err = cli_in_process(capsys, "--decode", "http://127.0.0.1:1")
    assert code == 2 and "no tokenizer: give --tokenizer" in err
    code, err = cli_in_process(capsys, "--decode", "http://127.0.0.1:1", "--tokenizer", str(tmp_path / "missing"))
    assert code == 2 and f"cannot load tokenizer '{tmp_path / 'missing'}'" in err
    assert "--tokenizer-fallback approx" in err


def test_weight_flags_reach_the_policies() -> None:
    from pdserve.router.shell.cli import build_parser, config_from_args
    from pdserve.router.shell.state import RouterState

    args = build_parser().parse_args(["--decode", "http://127.0.0.1:1", "--cost-overlap-weight", "3",
                                      "--cost-request-tokens", "10", "--policy", "kv-aware", "--tokenizer-mode", "mock"])
    state = RouterState(config_from_args(args))
    w = state.decode_policy.weights  # type: ignore[attr-defined]
    assert (w.overlap_weight, w.request_tokens, w.kv_tokens) == (3.0, 10.0, 2048.0)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def test_router_process_serves_and_stops_on_sigterm() -> None:
    with ExitStack() as stack:
        (w,) = spawn(stack, 1, speedup=200.0, pd=False, events=False)
        port = int(dead_url().rsplit(":", 1)[1])
        proc = subprocess.Popen([sys.executable, "-m", "pdserve.cli", "router", "--port", str(port), "--decode", w.url,
                                 "--policy", "least_loaded", "--tokenizer-mode", "mock"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            url = f"http://127.0.0.1:{port}"
            # Deadlines that only catch a hang: two router processes start in ~2 CPU-seconds, which a CI
            # machine at load 20 on 2 cores stretches far past the 20 s this once allowed.
            deadline = time.monotonic() + 120
            while not _healthy(url):
                assert proc.poll() is None, proc.communicate()[0]
                assert time.monotonic() < deadline, "the router never answered /health"
                time.sleep(0.1)
            r = httpx.post(url + "/v1/completions", json={"model": MODEL, "prompt": "hi", "max_tokens": 2}, timeout=60)
            assert r.status_code == 200 and "policy=least_loaded" in r.headers["x-pdserve-route"]
            # The default front end is the lean one (--http-server lean): a header line over 8,190
            # bytes is its JSON 431 naming the header (aiohttp's server answers a plain 400).
            r = httpx.get(url + "/health", headers={"x-big": "a" * 9000}, timeout=60)
            assert r.status_code == 431 and r.json()["error"]["param"] == "x-big", r.text
            os.killpg(proc.pid, signal.SIGTERM)
            assert proc.wait(60) == 0
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
