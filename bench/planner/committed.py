"""A committed ``evaluate.py`` window replayed again: its planner as ``evaluate.py`` builds it, the conditions it is
replayed under (the recorded history or the one a planner in service has; the ticks' phase), and the replay read
against the file's best schedule found. The one runner behind ``settings_sweep.py``, ``history_length.py``,
``restart.py`` and ``excess_terms.py``.

Conditions. A window was run once, after 600-900 s of history and with the planner ticking one interval after the
replay's first arrival. In service the planner remembers ``PolicyConfig.history_len`` intervals (or, for a trace
window, all the trace before it where that is shorter), and its ticks fall wherever the operator started. A
``Condition`` names one such choice: ``service`` replays with the service's history, its ticks put at the recorded
replay's instants (``SimConfig.first_tick_s``) so that it differs in history only; ``phase`` moves the ticks by that
fraction of an interval. The scored requests are the window's in every condition (``scored_hash`` checks it), so
every condition's GPU-hours read against the same best schedule.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import report
from recorded import recorded_argv

HERE = Path(__file__).resolve().parent


@dataclasses.dataclass(frozen=True)
class Condition:
    """One way to replay a window: with the service's history or the recorded one, ticks moved by ``step / of``
    of an interval from the recorded replay's."""

    service: bool = False
    step: int = 0
    of: int = 1

    @property
    def phase(self) -> float:
        return self.step / self.of

    @property
    def name(self) -> str:
        """``recorded``, ``service``, ``phase_1_of_4``, ``service_phase_1_of_4`` (history_length.json's names)."""
        if self.step == 0:
            return "service" if self.service else "recorded"
        return f"{'service_' if self.service else ''}phase_{self.step}_of_{self.of}"


def parse_condition(name: str) -> Condition:
    """A condition from its ``name``."""
    service = name.startswith("service")
    if name in ("recorded", "service"):
        return Condition(service)
    step, _, of = name.removeprefix("service_").removeprefix("phase_").partition("_of_")
    return Condition(service, int(step), int(of))


def replay_key(name: str, cond: Condition, n_conds: int) -> str:
    """A replay's key in a row: the setting's name alone under one condition, ``NAME@CONDITION`` under more."""
    return name if n_conds == 1 else f"{name}@{cond.name}"


def conditions(phases: int, history: str) -> list[Condition]:
    """Each history (``recorded``, ``service`` or ``both``) at each of ``phases`` tick phases (0, 1/N, ...)."""
    kinds = {"recorded": [False], "service": [True], "both": [False, True]}[history]
    n = max(phases, 1)
    return [Condition(k, j, n) if j else Condition(k) for k in kinds for j in range(n)]


def load_planner(argv: list[str]) -> tuple:
    """A result file's recorded command -> its parsed args, trace, setup, feasibility, and the shipped planner's
    config and profile as ``evaluate.py`` builds its ``planner`` variant."""
    import evaluate
    from variants import Flags, Knobs

    args = evaluate.build_parser().parse_args([*argv, "--out", "/dev/null"])
    trace, _tid, s, feas, _n, _h = evaluate.load_run(args)
    base, prof = evaluate.planner_config(args, s, Knobs(), Flags.of(args, s))
    return args, trace, s, feas, base, prof


def with_history(argv: list[str], seconds: float) -> list[str]:
    """``argv`` with ``--history`` set to ``seconds``."""
    out = list(argv)
    if "--history" in out:
        out[out.index("--history") + 1] = f"{seconds:g}"
    else:
        out += ["--history", f"{seconds:g}"]
    return out


def service_history_s(argv: list[str]) -> float | None:
    """The history a planner in service would have at the window: its memory span, or for a trace window all the
    trace before it where that is shorter. None where that is no longer than the recorded history, or where the
    run was recorded without history (it scores from its start after a warm-up: another window with history)."""
    import evaluate

    from pdserve.planner.core.policy_config import PolicyConfig

    args = evaluate.build_parser().parse_args([*argv, "--out", "/dev/null"])
    if not args.history:
        return None
    memory = PolicyConfig.history_len * args.interval
    longest = memory if args.trace is None else min(memory, args.start)
    return longest if longest > (args.history or 0.0) + 1e-9 else None


def aligned_first_tick(rec_first_arrival: float, rec_scored_from: float, svc_first_arrival: float,
                       svc_scored_from: float, interval: float, shift: float = 0.0) -> float:
    """The first tick of a replay of the same window after another history such that its ticks fall at the
    recorded replay's instants moved by ``shift`` seconds (the recorded one ticks one interval after its first
    arrival, then every interval; both replays' scored windows start at the same moment of the trace)."""
    base = svc_scored_from - rec_scored_from + rec_first_arrival + interval + shift  # in the other replay's time
    off = (base - svc_first_arrival) % interval
    return svc_first_arrival + (off if off > 1e-9 else interval)


def scored_hash(trace: Any, warmup: float) -> str:
    """The scored requests (after the warm-up): relative times and lengths, hashed; equal across conditions."""
    window = [(round(q.arrival_s - warmup, 6), q.input_tokens, q.output_tokens)
              for q in trace.requests if q.arrival_s >= warmup]
    return hashlib.sha256(repr(window).encode()).hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class Prepared:
    """Each condition's loaded run (``load_planner``'s tuple, the setup's first tick set), and the recorded run's
    trace hash and scored requests (``scored_hash``): a service history's trace is another file (a bursty seed's
    is another draw of its whole span), so a condition is read against the committed file's best where it scores
    the recorded requests, not where its trace hash matches."""

    runs: dict[Condition, tuple]
    recorded_sha: str
    recorded_scored: str


def prepare(argv: list[str], conds: Iterable[Condition], service_s: float | None) -> Prepared:
    """The conditions' runs. The recorded replay at phase 0 keeps the simulator's own first tick (it must give the
    committed row). A service condition needs ``service_s``."""
    conds = list(conds)
    rec = load_planner(argv)
    svc = load_planner(with_history(argv, service_s)) if any(c.service for c in conds) and service_s else None
    (rargs, rtrace, rs, rfeas, _, _) = rec
    rec_t0, interval = rtrace.requests[0].arrival_s, rs.interval_s
    out = {}
    for c in conds:
        if c.service and svc is None:
            raise ValueError("a service condition needs the service's history (service_s)")
        args, trace, s, feas, cfg, prof = svc if c.service else rec
        if c.service:
            first = aligned_first_tick(rec_t0, rfeas.scored_from_s, trace.requests[0].arrival_s, feas.scored_from_s,
                                       interval, c.phase * interval)
            s = dataclasses.replace(s, first_tick_s=first)
        elif c.step:  # the recorded first tick (one interval after the first arrival), moved
            s = dataclasses.replace(s, first_tick_s=rec_t0 + interval * (1 + c.phase))
        out[c] = (args, trace, s, feas, cfg, prof)
    return Prepared(out, rtrace.sha256, scored_hash(rtrace, rargs.warmup))


def not_the_window(row: dict, recorded_scored: str) -> None:
    """Replays (``row["replays"]``) whose condition scored other requests than the recorded run
    (``row["scored_requests"]``: replay name -> ``scored_hash``) get no multiple of the file's best and no verdict;
    ``row["same_scored_requests"]`` says whether every one scored the recorded requests."""
    row["same_scored_requests"] = all(h == recorded_scored for h in row["scored_requests"].values())
    for name, h in row["scored_requests"].items():
        if h != recorded_scored:
            row["replays"][name] |= {"gpu_hours_vs_best": None, "meets_target": False}


def ticks_from_scored_start(trace: Any, s: Any, feas: Any) -> float:
    """Where the ticks fall within an interval, from the scored window's start (seconds)."""
    first = s.first_tick_s if s.first_tick_s is not None else trace.requests[0].arrival_s + s.interval_s
    return round((first - feas.scored_from_s) % s.interval_s, 3)


def read_against_best(row: dict, d: dict) -> bool:
    """A replayed row (``replays``: name -> attainment and GPU-hours) read against its committed result file ``d``:
    each replay's GPU-hours as a multiple of the file's best schedule found and whether it meets the target, and the
    row's file (repository-relative), the file's commit and whether the replayed trace is the file's. Returns that
    last (no multiple is read from another trace)."""
    best = d["results"].get("best", {}).get("gpu_hours")
    same_trace = d["trace"].get("sha256") == row["trace_sha256"]
    for r in row["replays"].values():
        r["gpu_hours_vs_best"] = round(r["gpu_hours"] / best, 4) if best and same_trace else None
        r["meets_target"] = (r["gpu_hours_vs_best"] is not None and r["attainment_after_warmup"] is not None
                             and report.heldout_target_met(r["attainment_after_warmup"], r["gpu_hours_vs_best"]))
    f = Path(row["file"]).resolve()
    row |= {"file": str(f.relative_to(HERE.parents[1])) if f.is_relative_to(HERE.parents[1]) else row["file"],
            "file_commit": d["meta"]["commit"], "same_trace": same_trace}
    return same_trace


def same_as_committed(r: dict, d: dict, same_trace: bool) -> bool:
    """A replay gives the file's committed ``planner`` row: the same trace, attainment equal, GPU-hours within 1e-9
    (the harness check: the replay is the run the file recorded)."""
    committed = d["results"]["planner"]
    return (same_trace and r["attainment_after_warmup"] == committed["attainment_after_warmup"]
            and abs(r["gpu_hours"] - committed["gpu_hours"]) < 1e-9)


def replay_files(files: Iterable[Path], traces: Path | None, job: Callable[[str, list[str], dict], Any | None],
                 replay: Callable[[Any], dict], jobs: int) -> Iterator[tuple[dict, dict]]:
    """Each committed file's job (``job(path, recorded argv, document)``; None: the file is skipped) replayed in
    ``jobs`` processes; yields ``(row, document)`` in file order, the row read against the file's best
    (``read_against_best``)."""
    work, docs = [], {}
    for f in files:
        d = json.loads(Path(f).read_text())
        j = job(str(f), recorded_argv(d["meta"]["command"], traces), d)
        if j is not None:
            work.append(j)
            docs[str(f)] = d
    with ProcessPoolExecutor(max(jobs, 1)) as ex:
        for row in ex.map(replay, work):
            d = docs[row["file"]]
            read_against_best(row, d)
            yield row, d


def cell(name: str, r: dict) -> str:
    """One replay for a progress line: name, attainment, multiple of best, met."""
    vs = r.get("gpu_hours_vs_best")
    return (f"{name} {100 * r['attainment_after_warmup']:.2f} % {'-' if vs is None else format(vs, '.3f')}x"
            f"{' met' if r.get('meets_target') else ''}")
