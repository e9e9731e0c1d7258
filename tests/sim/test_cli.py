"""`pdserve sim` end to end in real processes: outputs, byte-identical results, errors."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def pdserve(*args: str, hashseed: str = "0", cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONHASHSEED": hashseed}
    return subprocess.run(
        [sys.executable, "-m", "pdserve.cli", *args], capture_output=True, text=True, env=env, timeout=120, cwd=cwd
    )


@pytest.fixture
def mooncake(tmp_path: Path) -> Path:
    rows = []
    for i in range(120):
        shared = [0, 1] if i % 2 else [0, 2, 3]
        n = len(shared) + 1
        rows.append({"timestamp": i * 150, "input_length": 512 * n - 100, "output_length": 10 + i % 30,
                     "hash_ids": shared + [1000 + i]})
    p = tmp_path / "trace.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def test_defaults_only_writes_everything_and_is_byte_identical(tmp_path: Path, mooncake: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    # Different hash seeds and working directories must not change a byte.
    ra = pdserve("sim", "--trace", str(mooncake), "--out", str(a), "--quiet", hashseed="0")
    rb = pdserve("sim", "--trace", str(mooncake), "--out", str(b), "--quiet", hashseed="12345", cwd=tmp_path)
    assert ra.returncode == 0, ra.stderr
    assert rb.returncode == 0, rb.stderr
    assert (a / "result.json").read_bytes() == (b / "result.json").read_bytes()
    assert (a / "requests.csv").read_bytes() == (b / "requests.csv").read_bytes()
    for name in ("latency_cdf.png", "attainment_vs_rate.png"):
        assert (a / name).stat().st_size > 1000
    doc = json.loads((a / "result.json").read_text())
    assert doc["header"]["trace"]["sha256"] == __import__("hashlib").sha256(mooncake.read_bytes()).hexdigest()
    assert doc["header"]["trace"]["format"] == "mooncake"
    assert len(doc["header"]["profiles"]["prefill"]["sha256"]) == 64
    assert doc["config"]["layout"] == "2P2D"
    s = doc["summary"]
    assert s["requests"] == s["finished"] == 120
    assert 0 < s["prefix_hit_ratio"] < 1
    assert s["kv_bytes_moved"] > 0 and s["gpus"] == 4
    assert {e["config"] for e in doc["sweep"]} == {"colocated:4", "chunked:4", "2P2D"}
    assert all(e["goodput_rps"] > 0 for e in doc["sweep"])
    with (a / "requests.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 120
    assert all(float(r["ttft_s"]) > 0 for r in rows)


def test_layout_and_slo_flags(tmp_path: Path, mooncake: Path) -> None:
    out = tmp_path / "o"
    r = pdserve("sim", "--trace", str(mooncake), "--out", str(out), "--quiet", "--no-sweep", "--config", "chunked:2",
                "--ttft-slo-ms", "1", "--itl-slo-ms", "1", "--rate-scale", "2", "--ingress-ms", "3", "--pd-handoff-ms", "2")
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "result.json").read_text())
    assert doc["config"]["layout"] == "chunked:2"
    assert doc["summary"]["attainment"] == 0.0  # nothing meets a 1 ms TTFT
    assert doc["header"]["rate_scale"] == 2.0
    assert (doc["config"]["ingress_s"], doc["config"]["pd_handoff_s"]) == (0.003, 0.002)
    assert doc["header"]["trace"]["duration_s"] == pytest.approx(119 * 0.15 / 2)
    assert not (out / "attainment_vs_rate.png").exists()


@pytest.mark.parametrize(
    ("content", "args", "message"),
    [
        ('{"timestamp": 0, "input_length": -3, "output_length": 1}\n', (), "trace.jsonl:1: field 'input_length': negative value -3"),
        ('{"timestamp": 0, "input_length": 30, "output_length": 1}\n', ("--config", "3x"), "bad configuration '3x'"),
        ('{"timestamp": 0, "input_length": 30, "output_length": 1}\n', ("--profile", "opt-66b-a100", "--tp", "1"),
         "needs 13"),
        ('{"timestamp": 0, "input_length": 30, "output_length": 1}\n', ("--kv-link-gbps", "0"), "kv_link_gbps"),
        ('{"timestamp": 0, "input_length": 30, "output_length": 1}\n', ("--ingress-ms", "-1"), "ingress_s"),
    ],
)
def test_bad_input_exits_2_naming_the_problem(tmp_path: Path, content: str, args: tuple[str, ...], message: str) -> None:
    p = tmp_path / "trace.jsonl"
    p.write_text(content)
    r = pdserve("sim", "--trace", str(p), "--out", str(tmp_path / "o"), "--quiet", "--no-sweep", *args)
    assert r.returncode == 2
    assert message in " ".join(r.stderr.split())


def test_an_error_names_a_long_path_whole_on_one_line(tmp_path: Path) -> None:
    # stderr is a pipe here: rich used to fold lines at 80 columns, mid-word, so a long path
    # (a CI worker's temporary folder) came out cut in two and could not be copied.
    folder = tmp_path / ("deep-" * 16)
    folder.mkdir()
    p = folder / "trace.jsonl"
    p.write_text('{"timestamp": 0, "input_length": -3, "output_length": 1}\n')
    r = pdserve("sim", "--trace", str(p), "--out", str(tmp_path / "o"), "--quiet", "--no-sweep")
    assert r.returncode == 2
    assert f"{p}:1: field 'input_length': negative value -3" in r.stderr.splitlines()[0]
