"""The whole live loop: a real Prometheus scraping real `pdserve worker` processes behind a
real `pdserve router`, the planner reading PromQL and driving a local process pool.

The capacity profile here is chosen (not measured) so that the load ramp needs 3 prefill
and 2 decode replicas at its peak and 1 + 1 otherwise; latency correction is off because
the fast mock workers are far quicker than that profile says. The test checks the control
loop: scale up, scale down after the window, hold when Prometheus dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from pdserve.planner.shell.actuator_process_pool import ProcessPool, free_port
from pdserve.planner.core.decision import HOLD_ERROR
from pdserve.planner.shell.loop import run_loop
from pdserve.planner.core.policy import PlannerPolicy, PolicyConfig
from pdserve.planner.core.profile import CapacityProfile
from pdserve.planner.shell.source_prometheus import PrometheusSource, PromQL
from prometheus_server import PrometheusServer, file_sd

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="needs Debian's prometheus binary"),
]

ISL, OSL = 256, 16
LOW, HIGH = 0.5, 4.0  # req/s


def flat_profile() -> CapacityProfile:
    """600 prompt tok/s per prefill replica within TTFT, 60 generated tok/s per decode replica."""
    pre = [{"isl": isl, "throughputTokensPerS": thr, "ttftMeanMs": lat, "ttftTailMs": lat}
           for isl in (16, 4096) for thr, lat in ((300, 100), (600, 900), (900, 5000))]
    dec = [{"context": c, "concurrency": n, "throughputTokensPerS": thr, "itlMeanMs": lat, "itlTailMs": lat}
           for c in (16, 4096) for n, thr, lat in ((1, 30, 10), (2, 60, 40), (4, 90, 200))]
    return CapacityProfile.model_validate({"prefill": {"points": pre}, "decode": {"points": dec}})


def start(cmd: list[str], log: Path) -> subprocess.Popen:
    with open(log, "wb") as f:
        return subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(10)


def wait_http(url: str, timeout: float = 120.0, *, proc: subprocess.Popen, log: Path) -> None:
    """Until ``url`` answers 200; fails fast, with ``log``'s tail, if ``proc`` exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: the server exited with {proc.returncode} before it was ready\n"
                               f"{log.read_text(errors='replace')[-2000:]}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} not ready after {timeout:.0f} s\n{log.read_text(errors='replace')[-2000:]}")


def write_targets(pool: ProcessPool, path: Path) -> None:
    groups = [{"targets": [f"127.0.0.1:{w.port}" for w in pool.workers[role]],
               "labels": {"namespace": "test", "pdserve_service": "svc", "pdserve_role": role}}
              for role in ("prefill", "decode")]
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(groups))
    os.replace(tmp, path)


@dataclass
class Counts:
    sent: int = 0
    completed: int = 0
    failed: list[str] = field(default_factory=list)  # why, per failed request


async def load(router: str, schedule: list[tuple[float, float]], stopped: asyncio.Event) -> Counts:
    """Open-loop arrivals at each (rate, seconds) phase; counts sent, completed and failed requests."""
    counts = Counts()
    async with httpx.AsyncClient(timeout=30) as client:
        async def one(i: int) -> None:
            prompt = f"r{i} " + " ".join(f"t{j}" for j in range(ISL - 1))
            counts.sent += 1
            try:
                r = await client.post(router + "/v1/completions", json={
                    "model": "mock", "prompt": prompt, "max_tokens": OSL, "ignore_eos": True})
            except httpx.HTTPError as e:
                counts.failed.append(f"{type(e).__name__}: {e}")
                return
            if r.status_code == 200 and r.json()["usage"]["completion_tokens"] == OSL:
                counts.completed += 1
            else:
                counts.failed.append(f"HTTP {r.status_code}: {r.text[:200]}")

        tasks, i = [], 0
        for rate, seconds in schedule:
            end = time.monotonic() + seconds
            while time.monotonic() < end and not stopped.is_set():
                tasks.append(asyncio.create_task(one(i)))
                i += 1
                await asyncio.sleep(1.0 / rate)
        await asyncio.gather(*tasks)
    return counts


async def test_planner_scales_with_prometheus(tmp_path: Path):
    worker_args = ["--mock-profile", "opt-13b-a100", "--mock-speedup", "20", "--mock-side-channel-port", "0",
                   "--tokenizer-mode", "mock",  # the hash-word tokenizer: no model files to fetch
                   "--kv-transfer-config", json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"})]
    discovery = tmp_path / "discovery.json"
    pool = ProcessPool(model="mock", worker_args=worker_args, discovery_file=discovery, log_dir=tmp_path)
    targets = tmp_path / "targets.json"
    router_port = free_port()
    procs: list[subprocess.Popen] = []
    prom = PrometheusServer([file_sd("workers", targets)])
    try:
        pool.scale("prefill", 1)
        pool.scale("decode", 1)
        write_targets(pool, targets)
        assert pool.wait_ready(40), "workers did not start"
        prom.__enter__()
        procs.append(start([sys.executable, "-m", "pdserve.cli", "router", "--host", "127.0.0.1", "--port",
                            str(router_port), "--discovery-file", str(discovery), "--tokenizer-mode", "mock"],
                           tmp_path / "router.log"))
        prom_url, router = prom.url, f"http://127.0.0.1:{router_port}"
        wait_http(router + "/health", proc=procs[-1], log=tmp_path / "router.log")

        cfg = PolicyConfig(ttft_slo_ms=1000, itl_slo_ms=50, interval_s=2.0, predictor="constant",
                           prefill_min=1, prefill_max=4, decode_min=1, decode_max=4,
                           scale_down_stabilization_s=6.0, correction=False, stale_after_s=10)
        policy = PlannerPolicy(cfg, flat_profile())
        source = PrometheusSource(prom_url, PromQL('namespace="test",pdserve_service="svc"', window="6s"),
                                  timeout_s=2)
        log: list[tuple[float, str, object]] = []  # (time, phase, decision)
        phase = ["warm"]

        def on_decision(obs, d) -> None:
            write_targets(pool, targets)
            log.append((time.monotonic(), phase[0], d))

        stopped = asyncio.Event()
        planner = asyncio.create_task(run_loop(policy, source, pool, stopped=stopped, on_decision=on_decision))
        gen_stop = asyncio.Event()
        loader = asyncio.create_task(load(router, [(LOW, 6), (HIGH, 16), (LOW, 18)], gen_stop))

        async def phase_marks() -> None:
            for name, after in (("low", 0), ("high", 6), ("falling", 16), ("end", 18)):
                await asyncio.sleep(after)
                phase[0] = name

        await asyncio.gather(phase_marks(), return_exceptions=True)
        counts = await asyncio.wait_for(loader, 60)
        peak = max(((d.prefill, d.decode) for _, p, d in log if p in ("high", "falling")), default=(0, 0))
        assert peak[0] >= 2 and peak[1] >= 2, [(p, d.reason) for _, p, d in log]
        last = log[-1][2]
        assert (last.prefill, last.decode) == (1, 1), [(p, d.reason) for _, p, d in log]
        assert any("stabilised" in d.reason for _, p, d in log if p == "falling")
        # The router kept serving while pools changed: the load was really offered, every request answered.
        print(f"load: sent={counts.sent} completed={counts.completed} failed={len(counts.failed)}")
        assert counts.sent >= 0.9 * (LOW * 24 + HIGH * 16), counts
        assert counts.completed + len(counts.failed) == counts.sent, counts
        assert len(counts.failed) <= 0.01 * counts.sent, counts.failed

        prom.kill()  # Prometheus dies: the planner must hold, not scale down or up
        phase[0] = "no-prometheus"
        sizes = (len(pool.workers["prefill"]), len(pool.workers["decode"]))
        await asyncio.sleep(3 * cfg.interval_s + 1)
        stopped.set()
        await asyncio.wait_for(planner, 30)
        dead = [d for _, p, d in log if p == "no-prometheus"]
        assert dead and all(d.held and d.hold_key == HOLD_ERROR for d in dead), [d.reason for d in dead]
        assert (len(pool.workers["prefill"]), len(pool.workers["decode"])) == sizes
    finally:
        for p in procs:
            stop(p)
        prom.__exit__(None, None, None)
        pool.close()


def _exporter(reg):
    """A /metrics server for ``reg`` in the text format vLLM's /metrics and our worker serve:
    prometheus_client's own server would answer Prometheus' OpenMetrics Accept header with ``vllm_`` names."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = generate_latest(reg)
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE_LATEST)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _prometheus_over(tmp_path: Path, ports: dict[str | None, int]) -> PrometheusServer:
    """A real Prometheus (started) scraping each port every second, labelled with its role (None: no role label)."""
    targets = tmp_path / "targets.json"
    targets.write_text(json.dumps([{"targets": [f"127.0.0.1:{port}"],
                                    "labels": {"namespace": "test", "pdserve_service": "svc"}
                                    | ({"pdserve_role": role} if role else {})}
                                   for role, port in ports.items()]))
    return PrometheusServer([file_sd("workers", targets)]).__enter__()


@contextlib.contextmanager
def _scraped(tmp_path: Path, servers: dict, feed):
    """``feed(stop)`` running in a thread while a real Prometheus scrapes the exporters ``servers`` (role -> server,
    None: no role label); yields a PrometheusSource over them (10 s rate window). Stops all of it on the way out."""
    import threading

    stop_feeding = threading.Event()
    feeder = threading.Thread(target=feed, args=(stop_feeding,), daemon=True)
    feeder.start()
    try:
        with _prometheus_over(tmp_path, {role: server.server_port for role, server in servers.items()}) as prom:
            yield PrometheusSource(prom.url, PromQL('namespace="test",pdserve_service="svc"', window="10s"),
                                   timeout_s=2)
    finally:
        stop_feeding.set()
        feeder.join(5)
        for server in servers.values():
            server.shutdown()
            server.server_close()


def test_a_role_that_saw_nothing_does_not_hide_the_other_roles_answer(tmp_path: Path):
    """The CI failure of session 5: a fresh prefill pod (series exist, no request in the window)
    made mean ISL 0/0 = NaN while decode still counted completions, so the planner held
    "mean ISL/OSL missing while requests flow" for as long as the window lasted. With real
    Prometheus: an idle prefill exporter and a busy decode exporter; every mean and quantile
    the planner reads must come from decode's series instead of NaN."""
    import math

    from prometheus_client import CollectorRegistry, Counter, Histogram

    from pdserve.planner.core.observation import PoolState

    metrics, servers = {}, {}
    for role in ("prefill", "decode"):
        reg = CollectorRegistry()
        metrics[role] = (Counter("vllm:request_success", "done", registry=reg),
                         Histogram("vllm:request_prompt_tokens", "isl", buckets=(128, 512, 2048), registry=reg),
                         Histogram("vllm:time_to_first_token_seconds", "ttft", buckets=(0.1, 1.0, 10.0), registry=reg))
        servers[role] = _exporter(reg)

    def feed_decode(stop_feeding) -> None:  # one completion of a 300-token prompt every 0.1 s, on decode only
        done, isl, ttft = metrics["decode"]
        while not stop_feeding.wait(0.1):
            done.inc()
            isl.observe(300)
            ttft.observe(0.5)

    with _scraped(tmp_path, servers, feed_decode) as source:
        deadline, obs = time.monotonic() + 40, None
        while time.monotonic() < deadline:  # until both targets have been scraped often enough for rate()
            obs = source.observe(time.time(), PoolState(1), PoolState(1))
            if obs.error is None and obs.request_rate > 0 and math.isfinite(obs.mean_isl):
                break  # (before the fix mean_isl stayed NaN to the deadline)
            time.sleep(0.5)
        assert obs is not None and obs.error is None, obs
        assert obs.request_rate > 0, obs
        # Prefill's own series exist but are flat: the answer is decode's, not NaN.
        assert obs.mean_isl == pytest.approx(300), obs
        assert obs.ttft_mean_s == pytest.approx(0.5), obs
        assert 0.1 < obs.ttft_tail_s <= 1.0, obs


def test_the_output_length_never_comes_from_the_prefill_pods(tmp_path: Path):
    """Session 21's CI: the decode pod's series were flat (Prometheus first scraped it after its only
    request), so the mean OSL fell back to every pod and read the prefill pods' generation histogram:
    1 token a request (a P/D prefill runs with max_tokens=1). With real Prometheus: a busy prefill
    exporter (1 generated token each) beside a flat decode one gives no OSL, not 1; an untyped
    (colocated) exporter is still the fallback, and the ISL still falls back to any role."""
    import math
    import threading

    from prometheus_client import CollectorRegistry, Counter, Histogram

    from pdserve.planner.core.observation import PoolState

    hists, servers = {}, {}
    for role in ("prefill", "decode", None):
        reg = CollectorRegistry()
        hists[role] = (Counter("vllm:request_success", "done", registry=reg),
                       Histogram("vllm:request_prompt_tokens", "isl", buckets=(128, 512, 2048), registry=reg),
                       Histogram("vllm:request_generation_tokens", "osl", buckets=(1, 16, 256), registry=reg))
        servers[role] = _exporter(reg)
    colocated = threading.Event()  # set: the untyped exporter serves too

    def feed(stop_feeding) -> None:  # prefill: one 300-token prompt every 0.1 s, 1 token generated; decode: nothing
        while not stop_feeding.wait(0.1):
            for role, osl_tokens in (("prefill", 1), *(((None, 200),) if colocated.is_set() else ())):
                done, isl, osl = hists[role]
                done.inc()
                isl.observe(300)
                osl.observe(osl_tokens)

    with _scraped(tmp_path, servers, feed) as source:
        def observe_until(done, what: str):
            deadline, obs = time.monotonic() + 40, None
            while time.monotonic() < deadline:
                obs = source.observe(time.time(), PoolState(1), PoolState(1))
                if obs.error is None and done(obs):
                    return obs
                time.sleep(0.5)
            raise AssertionError(f"{what}: {obs}")

        obs = observe_until(lambda o: math.isfinite(o.mean_isl), "prefill's ISL through the fallback")
        assert obs.mean_isl == pytest.approx(300), obs
        # (before: mean_osl == 1, the prefill pods' one token)
        assert math.isnan(obs.mean_osl), obs
        colocated.set()
        obs = observe_until(lambda o: math.isfinite(o.mean_osl), "the untyped exporter's OSL")
        assert obs.mean_osl == pytest.approx(200), obs
