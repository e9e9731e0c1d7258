"""`pdserve demo`: mock workers, router, planner and a replayed public trace, locally."""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import time
from collections.abc import Coroutine
from dataclasses import asdict
from pathlib import Path

import httpx
from rich.console import Console
from rich.live import Live

from pdserve.demo import live, report, timeline, workload
from pdserve.demo.replay import RequestResult, replay
from pdserve.demo.stack import Stack, StackConfig
from pdserve.demo.target import EndpointTarget, LocalTarget, Target
from pdserve.loadgen import aiperf_run
from pdserve.loadgen.aiperf import AiperfSettings, Record
from pdserve.loadgen.aiperf_run import wall_to_monotonic
from pdserve.sim.traces import TraceError

WINDOW_S = 10.0
Load = Coroutine[object, object, list[RequestResult]]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pdserve demo",
        description="Run the whole loop on this machine, no cluster: mock vLLM prefill and decode workers "
        "(processes) that the planner starts and stops, the router, and an excerpt of the Azure LLM "
        "inference trace replayed in compressed time. Writes a report folder at the end.",
    )
    p.add_argument("--duration", type=float, default=120.0, help="seconds of replay (default 120)")
    p.add_argument("--out", type=Path, default=Path("report"), help="report folder (default ./report)")
    p.add_argument("--no-live", action="store_true", help="plain progress lines instead of the live view")
    p.add_argument("--trace", type=Path, help="another trace (Azure CSV or Mooncake JSONL) instead of the bundled excerpt")
    p.add_argument("--rate", type=float, default=3.0, help="mean requests/s after thinning (default 3)")
    p.add_argument("--token-scale", type=float, default=1.0, help="scale the trace's token counts (default 1.0)")
    p.add_argument("--max-prompt-tokens", type=int, default=1536, help="cap (the default model, OPT-13B, has a 2048-token context)")
    p.add_argument("--max-output-tokens", type=int, default=160)
    p.add_argument("--ttft-slo-ms", type=float, default=400.0)
    p.add_argument("--itl-slo-ms", type=float, default=28.0)
    p.add_argument("--mock-profile", default="opt-13b-a100", help="the simulated model and GPU of the workers")
    p.add_argument("--mock-speedup", type=float, default=1.0, help="run the simulated GPU this many times faster")
    p.add_argument("--planner-interval", type=float, default=5.0, help="seconds between planner decisions")
    p.add_argument("--max-replicas", type=int, default=4, help="upper bound per pool")
    p.add_argument("--policy", default="kv_aware", help="router policy")
    p.add_argument("--endpoint", metavar="URL",
                   help="drive an already running pdserve router (e.g. a cluster's router Service) instead of "
                   "starting the local stack; the same replay and report")
    p.add_argument("--model", help="with --endpoint: the served model name (default: the first it lists)")
    p.add_argument("--planner-metrics", metavar="URL",
                   help="with --endpoint: the planner's /metrics base URL, to show its forecast")
    p.add_argument("--load-engine", choices=("builtin", "aiperf"), default="builtin",
                   help="who sends the requests: pdserve's own replay (default: each request is seen live as it "
                   "happens) or NVIDIA's aiperf (`pip install 'pdserve[load]'` or `make load-env`), which replays "
                   "the same requests at the same times and whose per-request export makes the same report")
    p.add_argument("--aiperf", metavar="PATH", help="with --load-engine aiperf: the aiperf program (default: the one "
                   "beside this Python, on PATH, or .cache/load-venv from `make load-env`)")
    p.add_argument("--tokenizer", help="with --load-engine aiperf: aiperf's tokenizer for its own token counts, a hub "
                   "id or a local directory as vLLM's --tokenizer (default: the served model's name)")
    return p


def _validate(args: argparse.Namespace) -> str | None:
    if not 5 <= args.duration <= 1800:
        return f"--duration must be between 5 and 1800 seconds, got {args.duration:g}"
    if args.trace is not None and not args.trace.is_file():
        return f"--trace {args.trace}: no such file"
    if args.endpoint is not None and not args.endpoint.startswith(("http://", "https://")):
        return f"--endpoint must be an http:// or https:// URL, got {args.endpoint!r}"
    if args.endpoint is None and (args.model or args.planner_metrics):
        return "--model and --planner-metrics only apply with --endpoint"
    if args.load_engine != "aiperf" and (args.aiperf or args.tokenizer):
        return "--aiperf and --tokenizer only apply with --load-engine aiperf"
    if not args.max_replicas >= 1:
        return "--max-replicas must be at least 1"
    for name in ("ttft_slo_ms", "itl_slo_ms", "mock_speedup", "planner_interval"):
        if not getattr(args, name) > 0:
            return f"--{name.replace('_', '-')} must be positive"
    return None


class Run:
    """The replay's live state, shared by the request callbacks and the sampler."""

    def __init__(self, target: Target, slo: timeline.Slo) -> None:
        self.target = target
        self.slo = slo
        self.t0 = time.monotonic()
        self.sent_times: list[float] = []
        self.finished: list[tuple[float, RequestResult]] = []
        self.samples: list[timeline.Sample] = []
        self._last_counters: timeline.Counters | None = None
        # When the load's schedule started, on this clock: at once for the built-in replay; aiperf
        # first configures itself (tens of seconds), and its records tell when it started.
        self.load_start: float | None = 0.0
        self.engine_stats: dict[str, float | str] = {}

    def now(self) -> float:
        return time.monotonic() - self.t0

    def elapsed(self) -> float:
        """Seconds of replayed schedule (0 while the load engine is still starting)."""
        return 0.0 if self.load_start is None else self.now() - self.load_start

    def on_sent(self, _req: workload.DemoRequest) -> None:
        self.sent_times.append(self.now())

    def on_result(self, res: RequestResult) -> None:
        self.finished.append((self.now(), res))

    def on_recorded(self, rec: Record) -> None:
        """A request reported after the fact, with its own wall-clock send and end times (aiperf)."""
        sent = wall_to_monotonic(rec.sent_wall_s) - self.t0
        self.sent_times.append(sent)
        self.finished.append((wall_to_monotonic(rec.end_wall_s) - self.t0, rec.result))
        start = sent - rec.scheduled_s
        self.load_start = start if self.load_start is None else min(self.load_start, start)

    def final_samples(self) -> list[timeline.Sample]:
        return timeline.resample(self.samples, self.sent_times, self.finished, WINDOW_S, self.slo,
                                 self.load_start or 0.0)

    async def sample(self, client: httpx.AsyncClient) -> timeline.Sample:
        pools = await self.target.pools(client)
        counters = await self.target.prefix_counters(client)
        ratio = timeline.hit_ratio(self._last_counters, counters)
        self._last_counters = counters
        predicted = await self.target.predicted_rps(client)
        s = timeline.sample(
            self.now(), WINDOW_S, self.sent_times, self.finished,
            inflight=len(self.sent_times) - len(self.finished),
            pools=pools,
            slo=self.slo, ratio=ratio, predicted_rps=predicted,
        )  # fmt: skip
        self.samples.append(s)
        return s


def _builtin(run: Run, requests: list[workload.DemoRequest]) -> Load:
    return replay(run.target.router_url, run.target.model, requests, run.on_result, run.on_sent)


async def _aiperf(run: Run, requests: list[workload.DemoRequest], settings: AiperfSettings, work_dir: Path,
                  console: Console) -> list[RequestResult]:
    run.load_start = None
    done = await aiperf_run.replay(settings, run.target.router_url, run.target.model, requests, work_dir,
                                   on_result=run.on_recorded, log=console.print)
    run.engine_stats = done.summary
    return done.results


async def _drive(run: Run, load: Load, duration: float, total: int, show_live: bool, console: Console) -> list[RequestResult]:
    replay_task = asyncio.create_task(load)
    async with httpx.AsyncClient() as client:
        live_view = Live(live.render(None, run.slo, 0, duration, 0, total), console=console, refresh_per_second=4) if show_live else None
        if live_view:
            live_view.start()
        try:
            next_tick = 1.0
            while not replay_task.done():
                await asyncio.sleep(max(0.0, next_tick - run.now()))
                next_tick += 1.0
                s = await run.sample(client)
                if live_view:
                    live_view.update(live.render(s, run.slo, run.elapsed(), duration, len(run.sent_times), total))
                elif int(s.t) % 10 == 0 and run.load_start is not None:
                    console.print(_line(s, run.elapsed(), run.slo, duration))
                run.target.check_alive()
        finally:
            if live_view:
                live_view.stop()
            if not replay_task.done():
                replay_task.cancel()
    return await replay_task


def _line(s: timeline.Sample, elapsed: float, slo: timeline.Slo, duration: float) -> str:
    def ms(v: float | None) -> str:
        return "   –  " if v is None else f"{v * 1000:5.0f}ms"

    att = "–" if s.attainment is None else f"{s.attainment * 100:.0f}%"
    return (
        f"[{elapsed:4.0f}/{duration:.0f}s] {s.sent_rps:4.1f} req/s  inflight {s.inflight:3d}  "
        f"TTFT p90 {ms(s.ttft_p90)} (SLO {slo.ttft_s * 1000:.0f})  ITL p90 {ms(s.itl_p90)} (SLO {slo.itl_s * 1000:.0f})  "
        f"SLO met {att}  prefill {s.prefill_replicas} decode {s.decode_replicas}  errors {s.errors}"
    )


def _planner_stats(path: Path) -> dict[str, object]:
    """What the planner did, from the decisions it appended (one JSON object a line)."""
    try:
        decisions = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, json.JSONDecodeError):
        return {}
    changes = [
        f"{d['previousPrefillReplicas']}P{d['previousDecodeReplicas']}D -> {d['prefillReplicas']}P{d['decodeReplicas']}D"
        for d in decisions
        if (d.get("prefillReplicas"), d.get("decodeReplicas")) != (d.get("previousPrefillReplicas"), d.get("previousDecodeReplicas"))
    ]
    return {
        "decisions": len(decisions),
        "held": sum(1 for d in decisions if d.get("held")),
        "replica changes": ", ".join(changes) if changes else "none",
    }


def _error(message: str) -> None:
    print(f"pdserve demo: error: {message}", file=sys.stderr)


_ERRORS_SHOWN = 5


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    console = Console()
    if (problem := _validate(args)) is not None:
        _error(problem)
        return 2
    try:
        config = workload.WorkloadConfig(
            duration_s=args.duration, mean_rate=args.rate, token_scale=args.token_scale,
            max_prompt_tokens=args.max_prompt_tokens, max_output_tokens=args.max_output_tokens,
        )  # fmt: skip
        trace, requests = workload.load(args.trace, config)
    except (ValueError, TraceError) as e:
        _error(str(e))
        return 2
    out: Path = args.out
    run_dir = out / "run"
    shutil.rmtree(run_dir, ignore_errors=True)
    stack_config = StackConfig(
        run_dir=run_dir, mock_profile=args.mock_profile, mock_speedup=args.mock_speedup,
        ttft_slo_ms=args.ttft_slo_ms, itl_slo_ms=args.itl_slo_ms, interval_s=args.planner_interval,
        prefill_max=args.max_replicas, decode_max=args.max_replicas, policy=args.policy,
    )  # fmt: skip
    slo = timeline.Slo(args.ttft_slo_ms / 1000, args.itl_slo_ms / 1000)
    where = f"against {args.endpoint}" if args.endpoint else f"workers simulate {args.mock_profile}"
    console.print(
        f"[bold]pdserve demo[/]: {len(requests)} requests from {Path(trace.source).name} "
        f"({trace.duration_s / 60:.0f} min of trace in {args.duration:.0f} s), {where}"
    )
    aiperf_exe = aiperf_run.find_aiperf(args.aiperf) if args.load_engine == "aiperf" else None
    if args.load_engine == "aiperf" and aiperf_exe is None:
        _error(f"--load-engine aiperf: no aiperf program {'at ' + args.aiperf if args.aiperf else 'found'} "
               "(pip install 'pdserve[load]', or make load-env)")
        return 2
    t_start = time.monotonic()
    stack: Stack | None = None
    target: Target
    try:
        if args.endpoint:
            target = asyncio.run(EndpointTarget.connect(args.endpoint, args.model, args.planner_metrics))
        else:
            with console.status("starting the planner, its worker pool and the router..."):
                stack = Stack(stack_config)
                stack.start()
            target = LocalTarget(stack)
    except ValueError as e:
        _error(str(e))
        return 2
    except (RuntimeError, TimeoutError) as e:
        _error(str(e))
        return 1
    aiperf_settings = None if aiperf_exe is None else AiperfSettings(aiperf_exe, args.tokenizer or target.model)
    try:
        run = Run(target, slo)
        load = (_builtin(run, requests) if aiperf_settings is None else
                _aiperf(run, requests, aiperf_settings, run_dir / "load", console))
        results = asyncio.run(_drive(run, load, args.duration, len(requests),
                                     not args.no_live and console.is_terminal, console))
    except KeyboardInterrupt:
        console.print("interrupted; stopping", style="yellow")
        return 130
    except RuntimeError as e:
        _error(str(e))
        return 1
    finally:
        if stack is not None:
            with console.status("stopping the router, planner and workers..."):
                stack.stop()
    samples = run.final_samples()
    summary = timeline.summarize(results, samples, slo)
    settings = {
        "trace": f"{Path(trace.source).name} (sha256 {trace.sha256[:12]})",
        "duration_s": args.duration, "requests": len(requests), "mean_rate_rps": args.rate,
        "token_scale": args.token_scale, "max_prompt_tokens": args.max_prompt_tokens,
        "max_output_tokens": args.max_output_tokens, "mock_profile": args.mock_profile,
        "mock_speedup": args.mock_speedup, "planner_interval_s": args.planner_interval,
        "max_replicas_per_pool": args.max_replicas, "router_policy": args.policy,
        "endpoint": args.endpoint or "local stack", "model": target.model,
        "load_engine": "builtin" if aiperf_settings is None else f"aiperf {run.engine_stats.get('aiperf_version', '')}".strip(),
        "wall_time_s": round(time.monotonic() - t_start, 1),
    }  # fmt: skip
    planner = _planner_stats(run_dir / "decisions.jsonl") if stack is not None else None
    engine = {k: v for k, v in run.engine_stats.items() if k != "aiperf_version"} or None
    files = report.write(out, summary, samples, results, slo, settings, planner, engine)
    console.print(f"[bold green]done[/]: {summary.succeeded}/{summary.requests} requests succeeded; report in {out}/")
    for key, value in asdict(summary).items():
        console.print(f"  {key}: {value}")
    console.print("  files: " + ", ".join(f.name for f in files))
    # Why each failed request failed, so a failed run says more than its count (the full list is in
    # requests.csv's error column).
    failed = [r for r in results if not r.ok]
    for r in failed[:_ERRORS_SHOWN]:
        console.print(f"  request {r.index} (sent at {r.sent_at:.1f} s) failed: {r.error}", style="red", markup=False,
                      soft_wrap=True)
    if len(failed) > _ERRORS_SHOWN:
        console.print(f"  ... and {len(failed) - _ERRORS_SHOWN} more in requests.csv", style="red")
    return 0 if summary.requests and summary.failed == 0 else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
