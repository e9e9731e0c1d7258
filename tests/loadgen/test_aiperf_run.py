"""The aiperf shell's own failure paths, with a stand-in program in place of aiperf (the real one
runs in tests/demo/test_demo_aiperf.py): a request aiperf did not report comes back failed, records
are followed while the program runs, and a non-zero exit is an error that quotes its output."""

from __future__ import annotations

import asyncio
import json
import stat
import sys
from pathlib import Path

import pytest

from pdserve.demo.workload import DemoRequest
from pdserve.loadgen import aiperf_run
from pdserve.loadgen.aiperf import AiperfSettings, Record

REQUESTS = [DemoRequest(i, 0.1 * i, f"p{i}", 10, 5) for i in range(3)]

# Writes a record for every request but the last, one at a time, then exits with the given code.
FAKE = """#!{python}
import json, sys, time
from pathlib import Path
args = sys.argv[1:]
art = Path(args[args.index("--artifact-dir") + 1])
rows = [json.loads(l) for l in Path(args[args.index("--input-file") + 1]).read_text().splitlines()]
art.mkdir(parents=True)
print("fake aiperf: configuring")
t = time.time_ns()
with open(art / "profile_export.jsonl", "w") as f:
    for i, row in enumerate(rows[:-1]):
        f.write(json.dumps({{"metadata": {{"conversation_id": row["session_id"], "benchmark_phase": "profiling",
            "request_start_ns": t + i * 100_000_000, "request_end_ns": t + i * 100_000_000 + 50_000_000}},
            "metrics": {{"time_to_first_token": {{"value": 20.0, "unit": "ms"}},
                        "request_latency": {{"value": 50.0, "unit": "ms"}},
                        "inter_chunk_latency": {{"value": [5.0, 5.0], "unit": "ms"}},
                        "output_sequence_length": {{"value": 3, "unit": "tokens"}}}}}}) + "\\n")
        f.flush()
        time.sleep(0.6)
print("fake aiperf: done")
sys.exit({code})
"""


def _fake(tmp_path: Path, code: int) -> str:
    path = tmp_path / "aiperf"
    path.write_text(FAKE.format(python=sys.executable, code=code))
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_a_request_without_a_record_is_failed_and_records_arrive_during_the_run(tmp_path: Path) -> None:
    seen: list[tuple[float, Record]] = []
    settings = AiperfSettings(_fake(tmp_path, 0), "builtin")
    loop = asyncio.new_event_loop()
    try:
        done = loop.run_until_complete(aiperf_run.replay(
            settings, "http://127.0.0.1:9", "m", REQUESTS, tmp_path / "work",
            on_result=lambda rec: seen.append((loop.time(), rec))))
    finally:
        loop.close()
    assert [r.index for r in done.results] == [0, 1, 2]
    assert done.results[0].ok and done.results[1].ok and done.results[0].gaps_s == [0.005, 0.005]
    assert done.results[2].error == "aiperf returned no record"
    # Followed as written: the second record came to the callback a poll or more after the first.
    assert [rec.result.index for _, rec in seen] == [0, 1] and seen[1][0] - seen[0][0] > 0.3
    # sent_at: from the records' own send times, on the schedule's clock (request 1 is due 0.1 s in); to a microsecond:
    # epoch seconds as floats carry 2.4e-7 s per ulp, and the schedule's start may come from request 1's record
    # (session 22's fresh-clone CI read 2.4e-7 for request 0).
    assert done.results[0].sent_at == pytest.approx(0.0, abs=1e-6) and done.results[1].sent_at == pytest.approx(0.1, abs=1e-5)
    rows = [json.loads(line) for line in (tmp_path / "work" / "aiperf_input.jsonl").read_text().splitlines()]
    assert [r["session_id"] for r in rows] == ["pdserve-0", "pdserve-1", "pdserve-2"]


def test_aiperf_failing_is_an_error_with_its_output(tmp_path: Path) -> None:
    settings = AiperfSettings(_fake(tmp_path, 3), "builtin")
    with pytest.raises(RuntimeError, match=r"aiperf exited with 3(.|\n)*fake aiperf: done"):
        asyncio.run(aiperf_run.replay(settings, "http://127.0.0.1:9", "m", REQUESTS, tmp_path / "work"))


def test_find_aiperf_takes_an_explicit_program_or_says_none(tmp_path: Path) -> None:
    assert aiperf_run.find_aiperf(_fake(tmp_path, 0)) == str(tmp_path / "aiperf")
    assert aiperf_run.find_aiperf(str(tmp_path / "missing")) is None
