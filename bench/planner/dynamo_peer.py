#!/usr/bin/env python3
"""Dynamo 1.6.1's SLA planner in its own offline replay, on a trace and engine numbers from pdserve.

Runs in an environment with the peers installed (stdlib + ``dynamo`` only; see
bench/planner/README.md: ``ai-dynamo-runtime`` and ``aiconfigurator-core`` from the
``peers`` extra, ``ai-dynamo`` itself with ``--no-deps`` because its ``aisimulate``
dependency is a stub on PyPI). ``evaluate.py --dynamo-python PY`` writes the inputs and
calls this script with that interpreter; nothing here imports pdserve.

Inputs (``--calibration``, JSON written by evaluate.py from pdserve's engine model):
prefill time of one request alone per ISL, decode step time per (batch, context), KV
bytes per token, link bandwidth, KV blocks per replica, TP, the SLO and the limits.

What is Dynamo's and what is ours:
* the replay engine is Dynamo's mocker (its polynomial timing model); we calibrate it
  to pdserve's engine numbers with its own knobs: ``speedup_ratio`` (prefill) and
  ``decode_speedup_ratio`` so that its prefill flat out at the trace's mean prompt (one
  request alone at 4,096 tokens until session 28, alone at the mean prompt in session 28;
  ``calibrate``) and one 32-sequence decode step at context 1024 take what pdserve's
  engine model says, its KV capacity
  (``num_gpu_blocks``), KV transfer (bytes per token, bandwidth) and start-up delay;
  the achieved calibration error is measured and reported;
* the planner is Dynamo's SLA planner (``optimization_target="sla"``, ARIMA load
  predictor, its defaults otherwise), whose performance model normally comes from
  AISimulate: here the AIS session is replaced by one answering from the same pdserve
  engine numbers (``predict_prefill`` / ``predict_decode``), so Dynamo's own code turns
  them into its throughput regressions (``_generate_ais_*_fpms``). Those are only its
  start: as in a deployment, the replay feeds each tick's forward-pass metrics from the
  mocker's workers back (``offline/replay_adapter.py``), and the planner retunes the
  regression on them every load-loop tick (5 s, with load-based scaling off too:
  ``engine_adapter.tick`` -> ``observe_fpm`` -> ``tune_with_fpms``), so it learns the mocker's
  speed, not only ours (checked in session 30: the decode step it predicts at batch 32,
  context 1,024 moved 8.6 -> 10.3 ms over the held-out 8B 4x window). AISimulate's native
  estimator, which a profiled deployment would use, needs a download this machine and
  the package index do not serve, so the planner runs on its regression fallback, as
  an unprofiled deployment does. Our estimator options (sample count, batch and KV
  limits) do not reach that regression: aiconfigurator-core 0.12.0 reads them only from
  an argument Dynamo does not pass, so its defaults apply (64 samples).
"""

from __future__ import annotations

import argparse
import bisect
import importlib
import importlib.util
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace


# Dynamo's logging setup (dynamo.runtime.logging.configure_sglang_logging) writes an SGLang logging-config file into
# the temp folder at each start and never removes it (thousands after a sweep); this script runs no SGLang. Its own
# switch skips that step.
os.environ.setdefault("DYN_SKIP_SGLANG_LOG_FORMATTING", "1")


def _interp(xs: list[float], ys: list[float], x: float) -> float:
    if x <= xs[0]:
        return ys[0] * x / xs[0] if xs[0] > 0 else ys[0]
    if x >= xs[-1]:
        return ys[-1] * x / xs[-1]
    i = bisect.bisect_right(xs, x)
    f = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
    return ys[i - 1] + f * (ys[i] - ys[i - 1])


class EngineSession:
    """Stands in for an AISimulate session: latencies (ms) from pdserve's engine model."""

    def __init__(self, cal: dict) -> None:
        self.isl = [float(x) for x in cal["prefill_isl"]]
        self.pre_ms = [float(x) for x in cal["prefill_ms"]]
        self.dec = {int(c): (list(map(float, v["batch"])), list(map(float, v["ms"]))) for c, v in cal["decode"].items()}
        self.ctxs = sorted(self.dec)

    def predict_prefill(self, batch: int, isl: int, prefix: int) -> float:
        return batch * _interp(self.isl, self.pre_ms, float(isl - prefix))

    def predict_decode(self, batch: int, ctx: int, *_: object) -> float:
        per_ctx = [_interp(*self.dec[c], float(batch)) for c in self.ctxs]
        return _interp([float(c) for c in self.ctxs], per_ctx, float(ctx))


def engine_args(cal: dict, worker_type: str, speedup: float, decode_speedup: float) -> dict:
    return {
        "engine": {
            "worker_type": worker_type, "block_size": cal["block_size"], "num_gpu_blocks": cal["num_gpu_blocks"],
            "max_num_seqs": cal["max_num_seqs"], "max_num_batched_tokens": cal["max_num_batched_tokens"],
            "max_model_len": cal["max_model_len"], "speedup_ratio": speedup, "decode_speedup_ratio": decode_speedup,
            "kv_transfer_bytes_per_token": cal["kv_bytes_per_token"],
            "kv_transfer_bandwidth": cal["kv_link_gbytes_per_s"],
        },
        "tensor_parallel_size": cal["tp"],
        "startup_time": cal["startup_s"],
    }


def _write(path: Path, rows: list[dict]) -> None:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def _probe(cal: dict, work: Path, name: str, rows: list[dict], speedup: float, decode_speedup: float, *,
           fast_link: bool = False) -> list[dict]:
    """The mocker's per-request records for ``rows`` on one prefill and one decode worker at these speed ratios
    (``fast_link``: the KV link a thousand times faster, so that no transfer holds either side back): the one
    replay behind every calibration probe."""
    from dynamo.replay import api

    if fast_link:
        cal = cal | {"kv_link_gbytes_per_s": cal["kv_link_gbytes_per_s"] * 1000}
    f = work / f"{name}.jsonl"
    _write(f, rows)
    return api.run_trace_replay(str(f), prefill_engine_args=engine_args(cal, "prefill", speedup, 1.0),
                                decode_engine_args=engine_args(cal, "decode", 1.0, decode_speedup),
                                capture_per_request=True, trace_block_size=64).per_request


def decode_itl_ms(cal: dict, work: Path, n: int, ctx: int, decode_speedup: float) -> float:
    """The mocker's decode step with ``n`` sequences of context ``ctx`` (+ up to 64 generated): the median ITL of
    ``n`` requests that arrive together, their prefills and KV transfers made a thousand times faster so that all
    ``n`` decode as one batch. (At their real speed the prefills come one after another, each request decodes its
    tokens nearly alone, and the ITL read is a small batch's: Dynamo results before session 28 were calibrated so,
    their mocker's decode at a real batch of 32 a sixth slower than pdserve's engine on 70B TP4.)"""
    rows = [{"timestamp": 0, "input_length": ctx, "output_length": 64,
             "hash_ids": list(range(k * 1000, k * 1000 + -(-ctx // 64)))} for k in range(n)]
    per_request = _probe(cal, work, f"decode_{n}_{ctx}", rows, 1000.0, decode_speedup, fast_link=True)
    itl = sorted(x["itl_ms"] for x in per_request if x.get("itl_ms") is not None)
    return itl[len(itl) // 2]


def prefill_ms(cal: dict, work: Path, isl: int, speedup: float, decode_speedup: float) -> float:
    """The mocker's prefill of one ``isl``-token prompt on an idle pair at these speed ratios: admitted to KV held."""
    rows = [{"timestamp": 0, "input_length": isl, "output_length": 1, "hash_ids": list(range(-(-isl // 64)))}]
    r = _probe(cal, work, f"prefill_{isl}_{speedup:g}", rows, speedup, decode_speedup)[0]
    return float(r["source_held_ms"] - r["prefill_admit_ms"])


def prefill_flat_out(cal: dict, work: Path, isl: int, speedup: float, n: int = 256) -> float:
    """The mocker's prefill flat out (prompt tokens/s): ``n`` prompts of ``isl`` tokens arriving together at one prefill
    worker (its own batching decides how many share a step), from the first prompt's KV held to the last; the KV link
    made a thousand times faster so that no transfer holds the worker back."""
    blocks = -(-isl // 64)
    rows = [{"timestamp": 0, "input_length": isl, "output_length": 1,
             "hash_ids": list(range(k * (blocks + 1), k * (blocks + 1) + blocks))} for k in range(n)]
    held = sorted(r["source_held_ms"] for r in _probe(cal, work, f"flat_out_{isl}_{speedup:g}", rows, speedup, 1.0,
                                                      fast_link=True))
    return (n - 1) * isl / ((held[-1] - held[0]) / 1000)


def pdserve_flat_out(cal: dict, isl: int) -> float:
    """pdserve's engine flat out at ``isl`` (prompt tokens/s): what its planner's profile calls saturated."""
    return _interp([float(x) for x in cal["prefill_isl"]], [float(x) for x in cal["prefill_flat_out_tokens_per_s"]],
                   float(isl))


PREFILL_MATCH = ("flat-out", "alone")


def calibrate(cal: dict, work: Path, isl: int = 4096, match: str = "flat-out") -> dict:
    """Measure the mocker at speed 1 and return the ratios that match pdserve's engine: the prefill at ``isl`` (the
    trace's mean prompt where evaluate.py runs it; 4096 before session 28), and one decode step at batch 32, context
    1024 (``decode_itl_ms``).

    ``match`` says which prefill: ``flat-out`` (since session 29) its throughput with the worker's batch full
    (``prefill_flat_out``), what a pool's capacity is; ``alone`` one request on an idle worker, its latency (sessions
    up to 28). The two are not proportional: matched alone at the Azure conversation's mean prompt, the mocker
    prefilled about one and a half times pdserve's engine flat out (its batched step is cheaper than ours), a pool
    of its prefill workers that much larger than the engine numbers both planners are told. Both are reported."""
    if match not in PREFILL_MATCH:
        raise ValueError(f"prefill match {match!r}: expected one of {PREFILL_MATCH}")
    mock_prefill_ms = prefill_ms(cal, work, isl, 1.0, 1.0)
    ours_prefill_ms = EngineSession(cal).predict_prefill(1, isl, 0)
    out: dict = {"prefill_match": match, f"prefill_isl{isl}_mocker_ms": mock_prefill_ms,
                 f"prefill_isl{isl}_pdserve_ms": ours_prefill_ms}
    if match == "flat-out":
        mock_flat, ours_flat = prefill_flat_out(cal, work, isl, 1.0), pdserve_flat_out(cal, isl)
        speedup = ours_flat / mock_flat  # the mocker's throughput scales with its speed-up, its times inversely
        out |= {f"prefill_isl{isl}_flat_out_mocker_tokens_per_s": mock_flat,
                f"prefill_isl{isl}_flat_out_pdserve_tokens_per_s": ours_flat,
                f"prefill_isl{isl}_alone_ratio_mocker_to_pdserve": mock_prefill_ms / speedup / ours_prefill_ms}
    else:
        speedup = mock_prefill_ms / ours_prefill_ms
    n, ctx = 32, 1024
    mock_itl_ms = decode_itl_ms(cal, work, n, ctx, 1.0)
    ours_itl_ms = EngineSession(cal).predict_decode(n, ctx + 32)
    return out | {"speedup_ratio": speedup,
                  "decode_b32_ctx1024_mocker_itl_ms": mock_itl_ms, "decode_b32_ctx1024_pdserve_itl_ms": ours_itl_ms,
                  "decode_speedup_ratio": mock_itl_ms / ours_itl_ms}


def check(cal: dict, work: Path, ratios: dict) -> dict:
    """The calibrated mocker against pdserve's engine at other points (reported, not tuned): the prefill alone and flat
    out at three ISLs, and the decode step (``decode_itl_ms``) at other batch sizes and contexts,
    where the single decode ratio fitted at batch 32, context 1024 need not hold (the mocker's timing model is its
    own)."""
    out = {}
    for isl in (1024, 4096, 8192):
        out[f"prefill_isl{isl}_ratio_mocker_to_pdserve"] = \
            prefill_ms(cal, work, isl, ratios["speedup_ratio"], ratios["decode_speedup_ratio"]) \
            / EngineSession(cal).predict_prefill(1, isl, 0)
        if "prefill_flat_out_tokens_per_s" in cal:  # engine numbers written since session 29
            out[f"prefill_isl{isl}_flat_out_ratio_mocker_to_pdserve"] = \
                prefill_flat_out(cal, work, isl, ratios["speedup_ratio"]) / pdserve_flat_out(cal, isl)
    kv_tokens = cal["num_gpu_blocks"] * cal["block_size"]
    for n, ctx in ((8, 1024), (128, 1024), (32, 4096), (128, 2048), (256, 1024)):
        if n * (ctx + 64) <= kv_tokens and n <= cal["max_num_seqs"]:
            out[f"decode_b{n}_ctx{ctx}_ratio_mocker_to_pdserve"] = \
                decode_itl_ms(cal, work, n, ctx, ratios["decode_speedup_ratio"]) / EngineSession(cal).predict_decode(n, ctx + 32)
    return out


def _shim_aisimulate() -> None:
    """``dynamo.replay.config`` imports ``aisimulate.runner`` at module level although the
    planner replay reaches it only through the AIS session path replaced in ``run``. PyPI
    serves ``aisimulate`` only as a stub that downloads from elsewhere, so provide the one
    name as a function that refuses to run (any call would mean our replacement missed)."""
    import types

    if "aisimulate.runner" in sys.modules:
        return
    try:
        import aisimulate.runner  # noqa: F401
        return
    except ImportError:
        pass

    def canonical_performance_config(*_: object, **__: object) -> dict:
        raise RuntimeError("AISimulate is not installed; the pdserve engine session should have been used")

    pkg, runner = types.ModuleType("aisimulate"), types.ModuleType("aisimulate.runner")
    runner.canonical_performance_config = canonical_performance_config  # type: ignore[attr-defined]
    pkg.runner = runner  # type: ignore[attr-defined]
    sys.modules["aisimulate"], sys.modules["aisimulate.runner"] = pkg, runner


@dataclass
class ForwardPassPerfModelConfig:
    """AISimulate's identity for a planner perf model, as Dynamo's planner builds it for an
    unprofiled deployment (``estimation_mode="fpm_regression"``), written out in both the
    new field names Dynamo reads back (model, system, tp, pp) and the legacy names
    aiconfigurator-core's ``RustForwardPassPerfModel.best_available`` parses (its native
    estimator then fails for want of a download and it falls back to its regression, which
    the planner tunes with the mocker's FPMs)."""

    model: str
    system: str
    backend: str
    worker_type: str
    estimation_mode: str = "fpm_regression"
    tp: int = 1
    pp: int = 1
    schema_version: int = 1
    model_name: str = ""
    system_name: str = ""
    tp_size: int = 1
    pp_size: int = 1

    def __post_init__(self) -> None:
        self.model_name, self.system_name, self.tp_size, self.pp_size = self.model, self.system, self.tp, self.pp

    @classmethod
    def from_legacy_engine_config(cls, legacy: dict, worker_type: str, options: dict | None) -> SimpleNamespace:
        return SimpleNamespace(estimator_config=dict(options or {}))


def _alias_aisimulate_core() -> None:
    """Make ``aisimulate_core[.x]`` resolve to ``aiconfigurator_core[.x]``: the PyPI package
    aiconfigurator-core 0.12.0 ships the same SDK (RustForwardPassPerfModel, common) under
    its own name; ForwardPassPerfModelConfig, which it lacks, is defined above."""
    import aiconfigurator_core

    names = {"aisimulate_core": "aiconfigurator_core", "aisimulate_core.sdk": "aiconfigurator_core.sdk",
             "aisimulate_core.sdk.common": "aiconfigurator_core.sdk.common",
             "aisimulate_core.sdk.utils": "aiconfigurator_core.sdk.utils",
             "aisimulate_core._native": "aiconfigurator_core._aiconfigurator_core"}
    for alias, real in names.items():
        try:
            sys.modules.setdefault(alias, importlib.import_module(real))
        except ImportError:
            pass
    sdk = sys.modules["aisimulate_core.sdk"]
    if not hasattr(sdk, "ForwardPassPerfModelConfig"):
        sdk.ForwardPassPerfModelConfig = ForwardPassPerfModelConfig  # type: ignore[attr-defined]
    del aiconfigurator_core


ROUTER_MODES = ("round_robin", "kv_router")  # the replay's two routers (dynamo.replay.api, router_mode)


def run(cal: dict, trace: Path, work: Path, ratios: dict, overrides: dict | None = None,
        router_mode: str = "round_robin") -> dict:
    _shim_aisimulate()
    try:
        import aisimulate_core  # noqa: F401
    except ImportError:
        _alias_aisimulate_core()
    import dynamo.replay.planner as dp
    from dynamo.replay import api

    session = EngineSession(cal)
    # The SLA planner's performance model normally comes from AISimulate (not installable
    # from PyPI); answer its two queries from pdserve's engine numbers instead.
    dp._ais_session_kwargs = lambda perf_config, args: {"config": {"pdserve": args["engine"]["worker_type"]}}
    dp.create_session = lambda **kw: session
    planner = {
        "mode": "disagg", "backend": "mocker", "environment": "virtual", "optimization_target": "sla",
        "ttft_ms": cal["ttft_ms"], "itl_ms": cal["itl_ms"],
        "throughput_adjustment_interval_seconds": int(cal["interval_s"]),
        "prefill_engine_num_gpu": cal["tp"], "decode_engine_num_gpu": cal["tp"],
        "max_gpu_budget": cal["tp"] * 2 * cal["max_replicas"], "min_endpoint": 1,
        "report_output_dir": str(work / "planner_reports"),  # its HTML report, never into the caller's cwd
    }
    # Dynamo's own knobs (e.g. prefill_min_endpoint, tighter ttft_ms / itl_ms targets): the equal-GPU-hours sweep
    # (peer_sweep.py) buys the peer capacity with them; the replay's SLA scoring below keeps the real SLO.
    planner |= overrides or {}
    meta = {role: {"provider": "ais", "config": {"pdserve": role}} for role in ("prefill", "decode")}
    wall = time.perf_counter()
    rep = api.run_trace_replay(
        str(trace), prefill_engine_args=engine_args(cal, "prefill", ratios["speedup_ratio"], 1.0),
        decode_engine_args=engine_args(cal, "decode", 1.0, ratios["decode_speedup_ratio"]),
        num_prefill_workers=1, num_decode_workers=1, planner_config=planner, performance_model_metadata=meta,
        capture_per_request=True, trace_block_size=cal["hash_block_tokens"], sla_ttft_ms=cal["ttft_ms"],
        sla_itl_ms=cal["itl_ms"], router_mode=router_mode)
    details = rep.planner.to_dict() if rep.planner is not None else {}
    ticks = [{"at_s": t["at_ms"] / 1000, "prefill": t["topology"].get("prefill", {}),
              "decode": t["topology"].get("decode", {}), "decision": t["runtime_decision"],
              "scale_to": t["effects"].get("scale_to")} for t in details.get("ticks", [])]
    return {
        "planner_config": planner, "router_mode": router_mode,
        "wall_s": round(time.perf_counter() - wall, 1),
        "gpu_hours": rep.summary.get("gpu_hours"),
        "summary": {k: v for k, v in rep.summary.items() if isinstance(v, (int, float, str)) or v is None},
        "requests": [{"arrival_ms": r["arrival_time_ms"], "ttft_ms": r.get("ttft_ms"), "e2e_ms": r.get("e2e_latency_ms"),
                      "output_length": r.get("output_length"), "status": r.get("terminal_status")}
                     for r in rep.per_request],
        "scaling_events": details.get("scaling_events", []),
        "planner_metadata": details.get("metadata", {}),
        "total_ticks": details.get("total_ticks"),
        "ticks": ticks,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, required=True, help="Mooncake-format JSONL (timestamp ms)")
    ap.add_argument("--calibration", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--limit", type=int, help="only the first N requests of the trace (quick runs)")
    ap.add_argument("--calibrate-isl", type=int, default=4096,
                    help="the prompt length the mocker's prefill speed is matched to pdserve's at (evaluate.py passes "
                         "the trace's mean: the two prefill times are not proportional)")
    ap.add_argument("--calibrate-prefill", choices=PREFILL_MATCH, default="flat-out",
                    help="match the mocker's prefill to pdserve's flat out (its throughput with the batch full, what a "
                         "pool's capacity is; default since session 29) or alone (one request's latency, as before)")
    ap.add_argument("--planner-json", type=json.loads, default={},
                    help="keys merged into Dynamo's planner_config (its field names), e.g. '{\"min_endpoint\": 2}'")
    ap.add_argument("--router-mode", choices=ROUTER_MODES, default="round_robin",
                    help="the replay's router: round robin (its default) or Dynamo's KV router, which its load-based "
                         "scaling reads (default %(default)s)")
    args = ap.parse_args()
    cal = json.loads(args.calibration.read_text())
    if args.limit:
        rows = args.trace.read_text().splitlines()[: args.limit]
        args.trace = args.out.parent / "trace_head.jsonl"
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.trace.write_text("\n".join(rows) + "\n")
    work = args.out.parent
    ratios = calibrate(cal, work, args.calibrate_isl, args.calibrate_prefill)
    ratios |= check(cal, work, ratios)
    res = run(cal, args.trace, work, ratios, args.planner_json, args.router_mode)
    import dynamo

    res["calibration"] = ratios
    res["dynamo_version"] = getattr(dynamo, "__version__", None) or "1.6.1"
    args.out.write_text(json.dumps(res, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
