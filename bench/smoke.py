"""Run every benchmark script on a tiny input so none of them rots (``make bench-smoke``).

    .venv/bin/python bench/smoke.py              # all of them, outputs in a temporary folder
    .venv/bin/python bench/smoke.py --only curves routing_quality
    .venv/bin/python bench/smoke.py --list

Each script runs as a user would run it (a subprocess, its own CLI), on the committed
trace excerpts under ``bench/sim/data/``, writing into a temporary folder, never over
the committed results. A script that exits non-zero, times out or writes none of the
files it promises fails the run. The numbers are not checked: a few seconds of input
say nothing about performance; this only proves that each script still runs end to end.
Scripts that need the control plane (``bench/operator``) run only when its binaries are
present (``PDSERVE_K8S_BIN`` or ``.cache/k8s/bin``, as ``make test`` builds them).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "bench" / "sim" / "data"
AZURE = str(DATA / "azure_conv_excerpt.csv")
MOONCAKE = str(DATA / "mooncake_conv_excerpt.jsonl")


@dataclass(frozen=True)
class Smoke:
    name: str
    script: str
    args: list[str]  # "{out}" is replaced by this script's output folder
    expect: list[str] = field(default_factory=list)  # files the run must write under {out}
    timeout_s: float = 120.0
    needs_k8s: bool = False
    needs_peers: bool = False  # a Python with ai-dynamo (PDSERVE_PEERS_PYTHON or .cache/peers-venv)
    peer_imports: tuple[str, ...] = ()  # modules the peers' Python must import, else the smoke is skipped
    needs_aiperf: bool = False  # NVIDIA's aiperf program (make load-env), else the smoke is skipped


SMOKES: list[Smoke] = [
    Smoke("readme_table", "bench/readme_table.py", ["--check"]),
    # The burst verdict block of bench/router/README.md against the result files it names (prints on failure only).
    Smoke("burst_readme", "bench/router/burst_readme.py", ["--check"]),
    Smoke("curves", "bench/sim/curves.py",
          ["--name", "smoke", "--requests", "200", "--seeds", "1", "2", "--window", "10", "--max-requests", "80",
           "--grid", "1.5", "--out", "{out}"], ["curves_smoke.json", "curves_smoke.png"]),
    Smoke("speed", "bench/sim/speed.py", ["--trace", MOONCAKE, "--minutes", "0.5", "--config", "chunked:2",
                                          "--runs", "1", "--out", "{out}/speed.json"], ["speed.json"]),
    Smoke("opcodes", "bench/sim/opcodes.py", ["--trace", MOONCAKE, "--minutes", "0.5", "--config", "1p1d",
                                              "--out", "{out}/opcodes.json"], ["opcodes.json"]),
    Smoke("routing_quality", "bench/router/routing_quality.py",
          ["--trace", MOONCAKE, "--minutes", "1", "--instances", "2", "--seeds", "2", "--out", "{out}/rq.json", "--plot",
           "{out}/rq.png"], ["rq.json", "rq.png"]),
    Smoke("routing_quality_disagg", "bench/router/routing_quality.py",
          ["--trace", MOONCAKE, "--minutes", "1", "--topology", "disagg", "--instances", "2", "--decode-instances", "2",
           "--seeds", "2", "--policies", "round_robin", "kv_aware", "--decode-reuse-threshold-tokens", "4096", "--out",
           "{out}/rqd.json"], ["rqd.json"]),
    Smoke("reuse_gaps", "bench/router/reuse_gaps.py", ["--trace", MOONCAKE, "--minutes", "1", "--out", "{out}/rg.json"],
          ["rg.json"]),
    Smoke("synth_mooncake", "bench/router/synth_mooncake.py", ["--minutes", "1", "--out", "{out}/syn.jsonl"],
          ["syn.jsonl"]),
    Smoke("dynamo_replay", "bench/router/dynamo_replay.py",
          ["--trace", MOONCAKE, "--workers", "2", "--num-gpu-blocks", "848", "--router-mode", "kv_router"],
          timeout_s=120, needs_peers=True),
    Smoke("routing_gap", "bench/router/routing_gap.py",
          ["--trace", MOONCAKE, "--minutes", "1", "--instances", "2", "--decode-instances", "2", "--runs", "2",
           "--dynamo-python", "{peers}", "--out", "{out}/gap.json"], ["gap.json"], timeout_s=180, needs_peers=True),
    Smoke("engine_agreement", "bench/router/engine_agreement.py",
          ["--trace", MOONCAKE, "--minutes", "1", "--instances", "2", "--decode-instances", "2", "--runs", "1",
           "--dynamo-python", "{peers}", "--out", "{out}/agree.json"], ["agree.json"], timeout_s=180, needs_peers=True),
    Smoke("kv_event_lag", "bench/sim/kv_event_lag.py", ["--requests", "10", "--out", "{out}/lag.json"], ["lag.json"]),
    Smoke("decision_time", "bench/router/decision_time.py",
          ["--workers", "4", "--blocks", "2000", "--requests", "50", "--runs", "2", "--out", "{out}/dt.json"], ["dt.json"]),
    Smoke("tokenize_cost", "bench/router/tokenize_cost.py",
          ["--runs", "1", "--words", "50", "--out", "{out}/tokenize_cost.json"], ["tokenize_cost.json"]),
    Smoke("overhead", "bench/router/overhead.py",
          ["--concurrency", "2", "--requests-per-stream", "1", "--rounds", "1", "--modes", "burst", "--only", "pdserve",
           "--out", "{out}/ov.json", "--plot", "{out}/ov.png"], ["ov.json"], timeout_s=180),
    Smoke("burst", "bench/router/burst.py",
          ["--streams", "8", "--rounds", "1", "--targets", "pdserve", "python-floor", "--max-tokens", "4", "--out", "{out}/burst.json",
           "--plot", "{out}/burst.png"], ["burst.json", "burst.md", "burst.png"], timeout_s=180),
    # A server: its end-to-end run is burst's above (target python-floor); here only its CLI.
    Smoke("python_floor", "bench/router/python_floor.py", ["--help"], timeout_s=30),
    Smoke("burst_breakdown", "bench/router/burst_breakdown.py",
          ["--streams", "8", "--bursts", "2", "--max-tokens", "4", "--client-procs", "1", "--out", "{out}/bd.json"],
          ["bd.json"], timeout_s=180),
    Smoke("front_cost", "bench/router/front_cost.py",
          ["--streams", "8", "--bursts", "1", "--reps", "1", "--gap-ms", "1", "--client-procs", "1",
           "--out", "{out}/front_cost.json"], ["front_cost.json"], timeout_s=120),
    # The load process alone, against a port nothing listens on: every stream is a recorded error.
    Smoke("burst_client", "bench/router/burst_client.py",
          ["--url", "http://127.0.0.1:9", "--streams", "3", "--start-at", "0", "--timeout", "5",
           "--out", "{out}/client.json"], ["client.json"], timeout_s=60),
    Smoke("tracing_cost", "bench/router/tracing_cost.py",
          ["--requests", "16", "--concurrency", "4", "--rounds", "1", "--out", "{out}/tracing.json"], ["tracing.json"],
          timeout_s=180),
    Smoke("hop_probe", "bench/sim/hop_probe.py",
          ["--trace", AZURE, "--requests", "3", "--speedups", "4", "--output-tokens", "4", "--out", "{out}/hop.json"],
          ["hop.json"], timeout_s=180),
    Smoke("fidelity", "bench/sim/fidelity.py",
          ["--trace", AZURE, "--requests", "6", "--speedups", "2", "--band-runs", "1",
           "--probe-json", str(REPO / "bench/sim/results/hop_probe.json"), "--out-dir", "{out}"], timeout_s=180),
    Smoke("fidelity_report", "bench/sim/fidelity_report.py",
          [str(REPO / "bench/sim/results/fidelity_1P1D.json"), "--out", "{out}/fidelity.md"], ["fidelity.md"]),
    Smoke("planner_evaluate", "bench/planner/evaluate.py",
          ["--trace", AZURE, "--duration", "0", "--limit", "150", "--warmup", "10", "--reactive-sweep",
           "--planner-sweep", "0", "900", "--out", "{out}/evaluation.json"], ["evaluation.json", "evaluation.png"],
          timeout_s=240),
    Smoke("planner_suite", "bench/planner/suite.py", ["--summarise-only", "--folder", "{out}"], ["summary.json"]),
    Smoke("planner_report", "bench/planner/report.py", ["--out", "{out}/report.md"], ["report.md"]),
    Smoke("planner_bursty", "bench/planner/bursty.py", ["--seed", "0"]),
    Smoke("planner_local_prefill", "bench/planner/local_prefill.py",
          ["--tuning-seeds", "0", "--held-out-seeds", "--limits", "16384", "--duration", "150", "--warmup", "10",
           "--out", "{out}/local_prefill.json"], ["local_prefill.json"], timeout_s=240),
    Smoke("planner_burst_misses", "bench/planner/burst_misses.py",
          ["--seeds", "0", "--variants", "planner_fit", "--duration", "150", "--warmup", "10",
           "--out", "{out}/burst_misses.json"], ["burst_misses.json"]),
    Smoke("planner_burst_cost", "bench/planner/burst_cost.py",
          ["--runs", "8b_1gpu/bursty_seed0", "--duration", "60", "--history", "0", "--variants", "planner_next",
           "planner_next2", "planner_young", "planner_next4", "--out", "{out}/burst_cost.json"], ["burst_cost.json"], timeout_s=180),
    Smoke("planner_forecast_error", "bench/planner/forecast_error.py",
          ["--runs", "8b_1gpu/bursty_seed0", "--duration", "300", "--history", "0", "--bounds", "0.5",
           "--out", "{out}/forecast_error.json"], ["forecast_error.json"], timeout_s=180),
    # The sweep's reactive half on a committed 150-request run (``--every``: also where reactive spent as much).
    Smoke("planner_peer_sweep", "bench/planner/peer_sweep.py",
          ["--run", str(REPO / "bench/planner/data/peer_sweep_smoke_run.json"), "--every", "--trace", AZURE,
           "--duration", "0", "--limit", "150", "--warmup", "10", "--out", "{out}/sweep.json"], ["sweep.json", "sweep.png"]),
    # The planner alone on a committed 150-request run, shipped and with one setting changed.
    Smoke("planner_pool_queueing", "bench/planner/pool_queueing.py",
          ["--trace", AZURE, "--model-profile", "llama-3.1-8b-h100", "--pools", "1", "2", "--rho", "0.8",
           "--requests-per-replica", "150", "--seeds", "1", "--out", "{out}/pq.json"], ["pq.json"]),
    Smoke("planner_settings_sweep", "bench/planner/settings_sweep.py",
          ["--files", str(REPO / "bench/planner/data/peer_sweep_smoke_run.json"), "--traces", str(DATA.parent),
           "--set", "headroom=prefill_utilization:0.9,hold_prefill_on_rise:false", "--out", "{out}/settings.json"],
          ["settings.json"]),
    # Why the planner's excess over the best schedule: a committed 150-request run with both, replayed once.
    Smoke("planner_excess_terms", "bench/planner/excess_terms.py",
          ["--files", str(REPO / "bench/planner/data/excess_smoke_run.json"), "--traces", str(DATA.parent),
           "--out", "{out}/excess.json"], ["excess.json"]),
    # A planner restarted cold and warm: the same committed run with both, a restart every 30 s of it.
    Smoke("planner_restart", "bench/planner/restart.py",
          ["--files", str(REPO / "bench/planner/data/excess_smoke_run.json"), "--traces", str(DATA.parent),
           "--restart-every", "30", "--out", "{out}/restart.json"], ["restart.json"]),
    # The planner on a committed run with history, replayed as recorded and after the longer history in service.
    Smoke("planner_history_length", "bench/planner/history_length.py",
          ["--files", str(REPO / "bench/planner/data/history_smoke_run.json"), "--traces", str(DATA.parent),
           "--out", "{out}/history_length.json"], ["history_length.json"]),
    Smoke("planner_rerun", "bench/planner/rerun.py",
          ["--files", str(REPO / "bench/planner/data/peer_sweep_smoke_run.json"), "--traces", str(DATA.parent),
           "--policies", "best", "causal_past", "--out-dir", "{out}"], ["peer_sweep_smoke_run.json"]),
    Smoke("planner_dynamo_load", "bench/planner/rerun.py",
          ["--files", str(REPO / "bench/planner/data/peer_sweep_smoke_run.json"), "--traces", str(DATA.parent),
           "--policies", "dynamo_load", "--dynamo-python", "{peers}", "--out-dir", "{out}"],
          ["peer_sweep_smoke_run.json"], timeout_s=300, needs_peers=True, peer_imports=("dynamo.replay.api",)),
    Smoke("planner_dynamo_peer", "bench/planner/dynamo_peer.py",
          ["--trace", MOONCAKE, "--calibration", str(REPO / "bench/planner/data/calibration_llama-3.1-8b-h100.json"),
           "--limit", "200", "--out", "{out}/dynamo.json"], ["dynamo.json"], timeout_s=300, needs_peers=True,
          # dynamo.replay.planner itself imports only after dynamo_peer.py's aisimulate shim (PyPI's aisimulate
          # is a stub): checking it here skipped this smoke on every peers venv.
          peer_imports=("dynamo.replay.api", "aiconfigurator_core")),
    Smoke("planner_cross_engine", "bench/planner/cross_engine.py",
          ["--files", "bench/planner/results/70b_tp4/bursty_seed1.json", "--limit", "300", "--policies", "planner", "dynamo",
           "static", "--out", "{out}/cross.json"], ["cross.json"], timeout_s=300, needs_peers=True,
          peer_imports=("dynamo.replay.api",)),
    Smoke("engine_speed", "bench/worker/engine_speed.py", ["--trace", AZURE, "--limit", "50", "--out-dir", "{out}"]),
    Smoke("calibration", "bench/worker/calibration.py", ["--requests-per-level", "1", "--out-dir", "{out}"],
          ["calibration_results.json"], timeout_s=180),
    Smoke("http_framework", "bench/worker/http_framework.py",
          ["--concurrency", "2", "--chunks", "2", "--rounds", "1", "--out-dir", "{out}"]),
    Smoke("worker_load", "bench/worker/load.py",
          ["--concurrency", "2", "--speedups", "64", "--seconds", "1", "--max-tokens", "4", "--out-dir", "{out}"],
          ["load_results.json"]),
    Smoke("worker_load_clients", "bench/worker/load_clients.py",
          ["--concurrency", "2", "--seconds", "1", "--max-tokens", "4", "--rounds", "1", "--out-dir", "{out}"],
          ["load_clients_results.json"], timeout_s=400, needs_aiperf=True),
    Smoke("disk_peak", "bench/setup/disk_peak.py",
          ["--watch", "{out}/w", "--interval", "0.1", "--out", "{out}/disk.json", "--", "dd", "if=/dev/zero",
           "of={out}/w/blob", "bs=1M", "count=4", "status=none"], ["disk.json", "w/blob"]),
    Smoke("operator", "bench/operator/reconcile_latency.py", ["--resources", "2", "--resync-seconds", "5",
                                                               "--out", "{out}"],
          ["results.json"], timeout_s=300, needs_k8s=True),
]


K8S_BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")


def peers_python() -> str | None:
    py = os.environ.get("PDSERVE_PEERS_PYTHON") or str(REPO / ".cache" / "peers-venv" / "bin" / "python")
    return py if Path(py).exists() else None


def peers_import(modules: tuple[str, ...]) -> bool:
    """Whether the peers' Python imports ``modules`` (the planner peer needs the peers-planner extra)."""
    py = peers_python()
    if py is None or not modules:
        return py is not None
    code = "; ".join(f"import {m}" for m in modules)
    return subprocess.run([py, "-c", code], capture_output=True, timeout=120, check=False).returncode == 0


def aiperf_available() -> bool:
    from pdserve.loadgen.aiperf_run import find_aiperf

    return find_aiperf() is not None


def k8s_available() -> bool:
    path = Path(os.environ.get("PDSERVE_K8S_BIN") or REPO / ".cache" / "k8s" / "bin")
    return all((path / b).exists() for b in K8S_BINARIES)


def run_one(s: Smoke, root: Path, python: str) -> tuple[bool, float, str]:
    out = root / s.name
    out.mkdir(parents=True, exist_ok=True)
    peers = peers_python()
    # "{peers}" in the args: the script runs here and is handed the peers' Python; else it runs in it
    if s.needs_peers and not any("{peers}" in a for a in s.args):
        python = peers or python
    cmd = [python, str(REPO / s.script), *(a.replace("{out}", str(out)).replace("{peers}", peers or "") for a in s.args)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH", "")) if p)}
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=s.timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return False, time.perf_counter() - t0, f"timed out after {s.timeout_s:g} s"
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        return False, dt, f"exit {r.returncode}\n{(r.stdout + r.stderr)[-3000:]}"
    missing = [f for f in s.expect if not (out / f).exists()]
    if missing:
        return False, dt, f"did not write {missing} under {out}"
    return True, dt, ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="+", default=None, help="run only these (names from --list)")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--keep", type=Path, default=None, help="write outputs here instead of a temporary folder")
    args = ap.parse_args(argv)
    if args.list:
        for s in SMOKES:
            print(f"{s.name:18} {s.script}")
        return 0
    unknown = set(args.only or []) - {s.name for s in SMOKES}
    if unknown:
        print(f"unknown smoke names: {sorted(unknown)} (see --list)", file=sys.stderr)
        return 2
    chosen = [s for s in SMOKES if args.only is None or s.name in args.only]
    failed = []
    with tempfile.TemporaryDirectory(prefix="pdserve-bench-smoke-") as tmp:
        root = args.keep or Path(tmp)
        for s in chosen:
            if s.needs_k8s and not k8s_available():
                print(f"SKIP {s.name:18} control-plane binaries not built (make k8s-bins)")
                continue
            if s.needs_peers and not peers_import(s.peer_imports):
                print(f"SKIP {s.name:18} no peers venv with {', '.join(s.peer_imports) or 'ai-dynamo'} "
                      "(bench/router/README.md, pyproject extras peers / peers-planner)")
                continue
            if s.needs_aiperf and not aiperf_available():
                print(f"SKIP {s.name:18} no aiperf program (make load-env)")
                continue
            ok, dt, why = run_one(s, root, sys.executable)
            print(f"{'ok  ' if ok else 'FAIL'} {s.name:18} {dt:6.1f} s  {s.script}", flush=True)
            if not ok:
                failed.append(s.name)
                print("     " + why.replace("\n", "\n     "), flush=True)
    if failed:
        print(f"bench-smoke: {len(failed)} of {len(chosen)} failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
