"""`pdserve demo --endpoint URL` drives an already running router (here: a router in
front of two mock workers, all on loopback) and writes the same report as the local demo."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from contextlib import ExitStack
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from pdserve.worker.testing import start_worker

from .router_proc import free_port, start_router

MODEL = "mock-llama"


@pytest.fixture
def running_router(tmp_path: Path):
    with ExitStack() as stack:
        workers = [stack.enter_context(start_worker(MODEL, speedup=50.0)) for _ in range(2)]
        url = start_router(stack, tmp_path, [w.url for w in workers], ["--tokenizer-mode", "mock"])
        yield url


@pytest.mark.timeout(180)
def test_demo_against_a_running_router_writes_the_same_report(running_router: str, tmp_path: Path) -> None:
    out = tmp_path / "report"
    proc = subprocess.run(
        [sys.executable, "-m", "pdserve.cli", "demo", "--endpoint", running_router, "--duration", "8",
         "--rate", "3", "--max-output-tokens", "20", "--no-live", "--out", str(out)],
        capture_output=True, text=True, timeout=170)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"against {running_router}" in proc.stdout and "requests succeeded" in proc.stdout
    for name in ("summary.md", "load_replicas.png", "latency.png", "timeline.json", "requests.csv"):
        assert (out / name).stat().st_size > 0, name
    data = json.loads((out / "timeline.json").read_text())
    summary, samples = data["summary"], data["samples"]
    assert summary["requests"] >= 10 and summary["failed"] == 0 and summary["ttft_p50"] > 0
    # Pools from the router's /health; prefix counters from the workers it names.
    assert samples and all(s["decode_replicas"] == 2 and s["prefill_replicas"] == 0 for s in samples)
    assert any(s["hit_ratio"] is not None for s in samples), "prefix counters read from the router's workers"
    md = (out / "summary.md").read_text()
    assert running_router in md and "## Planner" not in md
    assert not (out / "run" / "decisions.jsonl").exists(), "no local stack was started"


def test_endpoint_that_does_not_answer_is_a_clear_error(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pdserve.cli", "demo", "--endpoint", f"http://127.0.0.1:{free_port()}",
         "--duration", "5", "--no-live", "--out", str(tmp_path / "r")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "GET /v1/models failed" in proc.stderr, proc.stderr
    proc = subprocess.run([sys.executable, "-m", "pdserve.cli", "demo", "--endpoint", "localhost:8000"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--endpoint must be an http" in proc.stderr


class _Refusing(BaseHTTPRequestHandler):
    """Serves a model but refuses every completion, as an overloaded server would."""

    def log_message(self, *args: object) -> None:
        pass

    def _json(self, status: int, body: dict) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
        else:
            self._json(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._json(503, {"error": {"message": "no decode worker is up", "type": "ServiceUnavailableError"}})


def test_a_run_with_failed_requests_says_why_they_failed(tmp_path: Path) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pdserve.cli", "demo", "--endpoint", f"http://127.0.0.1:{server.server_port}",
             "--duration", "5", "--rate", "3", "--no-live", "--out", str(tmp_path / "r")],
            capture_output=True, text=True, timeout=120)
    finally:
        server.shutdown()
        server.server_close()
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    # Each shown failure names the request and the server's answer; the rest are counted.
    shown = [line for line in proc.stdout.splitlines() if "failed: HTTP 503" in line]
    assert shown and len(shown) <= 5 and "no decode worker is up" in shown[0], proc.stdout[-3000:]
    assert "more in requests.csv" in proc.stdout or len(shown) == int(json.loads(
        (tmp_path / "r" / "timeline.json").read_text())["summary"]["failed"])
