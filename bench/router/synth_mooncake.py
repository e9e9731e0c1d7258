"""A seeded synthetic multi-turn conversation trace in Mooncake's JSONL format.

    .venv/bin/python bench/router/synth_mooncake.py --seed 1 --minutes 10 \\
        --out bench/router/data/synthetic_mooncake_seed1.jsonl

Why: routing results on one public trace could be tuned to it; this trace has the same
format (``timestamp`` ms, ``input_length``, ``output_length``, ``hash_ids`` of 512-token
blocks) but a structure we choose and state, so both pdserve and Dynamo replay it.

Structure: conversations start as a Poisson process; each opens with one of
``--system-prompts`` shared system prompts (Zipf-popular, 1-8 blocks), then a private
document (2-12k tokens); each turn appends a user message (100-1000 tokens) and the
previous answer (100-600 tokens) to the context, after an exponential think time.
A block's hash id is the identity of the tokens up to its end: system-prompt blocks are
shared by every conversation with that prompt, full context blocks are stable across a
conversation's turns, and a prompt's last partial block is new each turn.
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass
from pathlib import Path

BLOCK = 512


@dataclass(frozen=True)
class Params:
    minutes: float = 10.0
    conversations_per_s: float = 1.1
    mean_turns: float = 4.0
    think_s: float = 60.0
    system_prompts: int = 20
    zipf_s: float = 1.1
    doc_tokens: tuple[int, int] = (2000, 12000)
    user_tokens: tuple[int, int] = (100, 1000)
    answer_tokens: tuple[int, int] = (100, 600)


def generate(seed: int, p: Params) -> list[dict[str, object]]:
    rng = random.Random(seed)
    ids: dict[tuple[object, ...], int] = {}

    def hid(key: tuple[object, ...]) -> int:
        return ids.setdefault(key, len(ids))

    sys_len = [rng.randint(1, 8) * BLOCK - rng.randint(0, BLOCK - 1) for _ in range(p.system_prompts)]
    weights = [1 / (k + 1) ** p.zipf_s for k in range(p.system_prompts)]
    horizon = p.minutes * 60
    rows = []
    t, conv = 0.0, 0
    while True:
        t += rng.expovariate(p.conversations_per_s)
        if t >= horizon:
            break
        conv += 1
        g = rng.choices(range(p.system_prompts), weights)[0]
        context = sys_len[g] + rng.randint(*p.doc_tokens)
        turns = 1
        while rng.random() > 1 / p.mean_turns:
            turns += 1
        now = t
        for turn in range(turns):
            context += rng.randint(*p.user_tokens)
            out = rng.randint(*p.answer_tokens)
            hashes = []
            for b in range(-(-context // BLOCK)):
                end = (b + 1) * BLOCK
                if end <= sys_len[g]:
                    hashes.append(hid(("sys", g, b)))
                elif end <= context:
                    hashes.append(hid(("conv", conv, b)))
                else:  # the partial last block: its content differs every turn
                    hashes.append(hid(("tail", conv, turn)))
            rows.append({"timestamp": round(1000 * now), "input_length": context, "output_length": out,
                         "hash_ids": hashes})
            context += out
            now += rng.expovariate(1 / p.think_s)
            if now >= horizon:
                break
    rows.sort(key=lambda r: r["timestamp"])  # type: ignore[arg-type, return-value]
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--conversations-per-s", type=float, default=Params.conversations_per_s)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    rows = generate(args.seed, Params(minutes=args.minutes, conversations_per_s=args.conversations_per_s))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    n_in = sum(int(r["input_length"]) for r in rows)  # type: ignore[call-overload]
    print(f"wrote {len(rows)} requests, mean input {n_in / max(len(rows), 1):.0f} tokens, to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
