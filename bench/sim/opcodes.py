"""Where a replay's interpreter work goes: Python bytecodes executed per function, load-independent.

    .venv/bin/python bench/sim/opcodes.py --trace /work/shared/data/traces/mooncake/conversation_trace.jsonl \\
        --minutes 10 --config 4p4d --out bench/sim/results/opcodes_mooncake_4p4d.json

The same window and configuration as ``speed.py``; one replay runs under ``sys.settrace`` with
per-opcode events on (some 100x slower), and every bytecode the interpreter executes inside
``Simulation.run`` is counted against its function. Bytecodes are not CPU time (one may be a
dict insert, another a local load) but, unlike a sampling profiler's shares, they are exact and
the same under any machine load, so they say where the Python-level work of a replay is and
whether a change removed some. ``speed.py --instructions`` counts machine instructions instead.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

from pdserve.sim.config import SimConfig, parse_layout
from pdserve.sim.simulator import Simulation

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
from resultmeta import Run, write_result  # noqa: E402
from speed import window  # noqa: E402


def count_opcodes(sim: Simulation) -> Counter[str]:
    """Bytecodes executed per function (``file:function``) while ``sim`` runs."""
    counts: Counter[str] = Counter()

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        if event == "opcode":
            code = frame.f_code
            counts[f"{Path(code.co_filename).name}:{code.co_name}"] += 1
        return tracer

    sys.settrace(tracer)
    try:
        sim.run()
    finally:
        sys.settrace(None)
    return counts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, required=True)
    ap.add_argument("--start-minute", type=float, default=0.0)
    ap.add_argument("--minutes", type=float, default=None)
    ap.add_argument("--config", default="4p4d")
    ap.add_argument("--profile", default="llama-3.1-8b-h100")
    ap.add_argument("--policy", default="kv_aware")
    ap.add_argument("--block-size", type=int, default=512)
    ap.add_argument("--token-budget", type=int, default=2048)
    ap.add_argument("--top", type=int, default=40, help="functions listed (the rest are summed)")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "opcodes.json")
    args = ap.parse_args()
    run = Run(runs=1)
    trace = window(args.trace, args.start_minute, args.minutes)
    cfg = SimConfig(**parse_layout(args.config), profile=args.profile, policy=args.policy,
                    block_size=args.block_size, token_budget=args.token_budget)
    counts = count_opcodes(Simulation(trace, cfg))
    total = sum(counts.values())
    top = counts.most_common(args.top)
    doc: dict[str, object] = {
        "trace": args.trace.name, "window_minutes": args.minutes, "start_minute": args.start_minute,
        "requests": len(trace.requests), "config": cfg.label, "policy": args.policy, "block_size": args.block_size,
        "bytecodes": total,
        "by_function": [{"function": f, "bytecodes": n, "share": round(n / total, 4)} for f, n in top],
        "rest": {"functions": len(counts) - len(top), "bytecodes": total - sum(n for _, n in top)},
    }
    write_result(args.out, doc, run)
    print(f"{total:,} bytecodes")
    for f, n in top:
        print(f"{100 * n / total:5.1f} %  {n:>10,}  {f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
