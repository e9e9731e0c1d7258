"""How fast the engine model replays a real trace (the simulator's inner loop).

    python bench/worker/engine_speed.py --trace /work/shared/data/traces/azure_2023/AzureLLMInferenceTrace_conv.csv
    python bench/worker/engine_speed.py --trace /work/shared/data/traces/mooncake/conversation_trace.jsonl

Feeds every request of the trace, at its arrival time, to one `Engine` (open loop,
virtual clock) and reports the wall time of the replay, engine steps per second,
and the simulated latencies. Azure CSV: TIMESTAMP, ContextTokens, GeneratedTokens.
Mooncake JSONL: timestamp (ms), input_length, output_length, hash_ids (512-token
blocks shared between requests, turned into shared token ids so prefix caching
sees the trace's real reuse). Writes engine_speed_results.json / .md.
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from collections.abc import Callable
from datetime import datetime
from functools import partial
from pathlib import Path

from rich.console import Console
from rich.progress import Progress

from pdserve.worker.engine import Engine, EngineConfig, EngineRequest
from pdserve.worker.perf import PerfModel, load_profile

MOONCAKE_BLOCK = 512


def load_trace(path: Path, limit: int | None) -> list[tuple[float, Callable[[], list[int]], int]]:
    """(arrival seconds from the start, prompt builder, output tokens) per request.

    Prompts are built when the request arrives: a long trace's prompts would not fit in memory at once."""
    out: list[tuple[float, Callable[[], list[int]], int]] = []
    if path.suffix == ".csv":
        with path.open() as f:
            rows = list(csv.DictReader(f))
        t0 = None
        for i, r in enumerate(rows[:limit]):
            ts = datetime.fromisoformat(r["TIMESTAMP"][:26]).timestamp()
            t0 = ts if t0 is None else t0
            n_in = max(1, int(r["ContextTokens"]))
            # distinct prompts: the Azure trace has lengths only
            out.append((ts - t0, partial(_distinct_prompt, i, n_in), max(1, int(r["GeneratedTokens"]))))
    else:
        with path.open() as f:
            for i, line in enumerate(f):
                if limit is not None and i >= limit:
                    break
                r = json.loads(line)
                n_in = max(1, int(r["input_length"]))
                out.append((r["timestamp"] / 1000.0, partial(_mooncake_prompt, i, n_in, tuple(r["hash_ids"])),
                            max(1, int(r["output_length"]))))
    return out


def _distinct_prompt(i: int, n_in: int) -> list[int]:
    return [100_000 + i * 7 + k for k in range(n_in)]


def _mooncake_prompt(i: int, n_in: int, hash_ids: tuple[int, ...]) -> list[int]:
    ids: list[int] = []
    for h in hash_ids:
        ids.extend(range(h * MOONCAKE_BLOCK, (h + 1) * MOONCAKE_BLOCK))
    return ids[:n_in] + [50_000_000 + i * 7 + k for k in range(max(0, n_in - len(ids)))]


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, required=True)
    ap.add_argument("--limit", type=int, default=None, help="first N requests only")
    ap.add_argument("--profile", default="llama-3.1-8b-h100")
    ap.add_argument("--max-model-len", type=int, default=131072)
    ap.add_argument("--out-dir", type=Path, default=Path(__file__).parent)
    args = ap.parse_args(argv)
    trace = load_trace(args.trace, args.limit)
    perf = PerfModel(load_profile(args.profile))
    engine = Engine(EngineConfig(num_blocks=perf.num_kv_blocks(16, 0.9), max_model_len=args.max_model_len), perf)
    arrivals: dict[str, float] = {}
    first: dict[str, float] = {}
    ttft: list[float] = []
    tpot: list[float] = []
    now, i, steps, done = 0.0, 0, 0, 0
    t0, c0 = time.perf_counter(), time.process_time()
    with Progress(console=Console(stderr=True)) as progress:
        task = progress.add_task(f"replay {args.trace.name}", total=len(trace))
        while done < len(trace):
            while i < len(trace) and trace[i][0] <= now:
                at, build, n_out = trace[i]
                ids = build()
                rid = f"r{i}"
                n_out = min(n_out, args.max_model_len - len(ids))
                engine.add_request(EngineRequest(rid, ids, max_tokens=max(1, n_out), ignore_eos=True, seed=i), at)
                arrivals[rid] = at
                i += 1
            if not engine.has_work():
                now = trace[i][0]
                continue
            out = engine.step(now)
            steps += 1
            now += out.duration
            for ev in out.tokens:
                if ev.index == 0:
                    first[ev.request_id] = now
                    ttft.append(now - arrivals[ev.request_id])
                if ev.finished:
                    done += 1
                    if ev.index > 0:
                        tpot.append((now - first[ev.request_id]) / ev.index)
                    progress.advance(task)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    s = engine.stats()
    res = {
        "trace": str(args.trace), "requests": len(trace), "profile": args.profile, "wall_s": wall, "cpu_s": cpu,
        "requests_per_cpu_s": len(trace) / cpu, "steps": steps, "steps_per_cpu_s": steps / cpu,
        "simulated_s": now, "generated_tokens": s.generated_tokens, "preemptions": s.preemptions,
        "prefix_hit_rate": s.prefix_hits / max(1, s.prefix_queries),
        "ttft_p50_s": pct(ttft, 0.5), "ttft_p99_s": pct(ttft, 0.99), "tpot_p50_s": pct(tpot, 0.5),
        "tpot_p99_s": pct(tpot, 0.99),
    }
    args.out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"engine_speed_{args.trace.stem.split('_')[0].lower()}"
    (args.out_dir / f"{stem}.json").write_text(json.dumps(res, indent=2))
    md = [f"# Engine replay speed: {args.trace.name} (generated by bench/worker/engine_speed.py)", "",
          "| metric | value |", "|---|---|"] + [
        f"| {k} | {v:.4g} |" if isinstance(v, float) else f"| {k} | {v} |" for k, v in res.items()]
    (args.out_dir / f"{stem}.md").write_text("\n".join(md) + "\n")
    Console().print(res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
