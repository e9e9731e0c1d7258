"""The live terminal view (rich): load, latency against the SLOs, pools, hit ratio."""

from __future__ import annotations

from rich.console import Group
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from pdserve.demo.timeline import Sample, Slo


def _lat(v: float | None, limit: float) -> Text:
    if v is None:
        return Text("–", style="dim")
    return Text(f"{v * 1000:7.0f} ms", style="green" if v <= limit else "bold red")


def render(sample: Sample | None, slo: Slo, elapsed: float, duration: float, sent: int, total: int) -> Panel:
    bar = ProgressBar(total=max(duration, 1e-9), completed=min(elapsed, duration), width=40)
    head = Text.assemble(("pdserve demo  ", "bold"), f"{elapsed:5.0f}/{duration:.0f} s   sent {sent}/{total}")
    table = Table(show_header=True, header_style="bold", expand=False, box=None, padding=(0, 2))
    table.add_column("")
    table.add_column("now (10 s window)", justify="right")
    table.add_column("SLO", justify="right")
    if sample is None:
        table.add_row("waiting for the first window", "", "")
    else:
        table.add_row("arrivals", f"{sample.sent_rps:6.1f} req/s", "")
        if sample.predicted_rps is not None:
            table.add_row("planner forecast", f"{sample.predicted_rps:6.1f} req/s", "")
        table.add_row("in flight", f"{sample.inflight:6d}", "")
        table.add_row("TTFT p50", _lat(sample.ttft_p50, slo.ttft_s), f"{slo.ttft_s * 1000:.0f} ms")
        table.add_row("TTFT p90", _lat(sample.ttft_p90, slo.ttft_s), "")
        table.add_row("ITL p50", _lat(sample.itl_p50, slo.itl_s), f"{slo.itl_s * 1000:.0f} ms")
        table.add_row("ITL p90", _lat(sample.itl_p90, slo.itl_s), "")
        att = "–" if sample.attainment is None else f"{sample.attainment * 100:5.1f} %"
        ok = sample.attainment is not None and sample.attainment >= slo.attainment
        table.add_row("SLO attainment", Text(att, style="green" if ok else "yellow"), f"{slo.attainment * 100:.0f} %")
        table.add_row("replicas prefill / decode", f"{sample.prefill_replicas} / {sample.decode_replicas}", "")
        hr = "–" if sample.hit_ratio is None else f"{sample.hit_ratio * 100:5.1f} %"
        table.add_row("prefix-cache hit ratio", hr, "")
        table.add_row("errors", Text(str(sample.errors), style="red" if sample.errors else "green"), "")
    return Panel(Group(head, bar, table), title="prefill/decode disaggregation on mock vLLM workers", border_style="cyan")
