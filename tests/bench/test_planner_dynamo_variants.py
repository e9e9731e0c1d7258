"""bench/planner/evaluate.py's Dynamo variants: Dynamo's SLA planner at a configuration of its own, run by
dynamo_peer.py with that configuration (the peer itself is exercised by the planner_dynamo_peer smoke where the
peers' venv is installed)."""

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path[:0] = [str(BENCH / "planner"), str(BENCH)]
import evaluate  # noqa: E402

AZURE = str(BENCH / "sim" / "data" / "azure_conv_excerpt.csv")


def argv(tmp_path: Path, *extra: str) -> list[str]:
    return ["--trace", AZURE, "--duration", "0", "--limit", "60", "--warmup", "10", *extra, "--out",
            str(tmp_path / "e.json")]


def recording_python(tmp_path: Path) -> tuple[Path, Path]:
    """A stand-in for the peers' python that records how dynamo_peer.py was called and fails (exit 3): the call is
    the contract. (python, where its argv lands)"""
    seen, fake = tmp_path / "argv.json", tmp_path / "python"
    fake.write_text(f"#!{sys.executable}\nimport json, sys\nopen({str(seen)!r}, 'w').write(json.dumps(sys.argv))\n"
                    "sys.exit(3)\n")
    fake.chmod(0o755)
    return fake, seen


def test_a_dynamo_variant_needs_the_peer_python(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="dynamo_load.*needs --dynamo-python"):
        evaluate.main(argv(tmp_path, "--policies", "dynamo_load"))


def test_dynamo_load_runs_dynamo_with_load_scaling_and_its_kv_router(tmp_path: Path) -> None:
    fake, seen = recording_python(tmp_path)
    with pytest.raises(SystemExit, match=r"dynamo_peer.py failed \(3\)"):
        evaluate.main(argv(tmp_path, "--policies", "dynamo_load", "--dynamo-python", str(fake)))
    called = json.loads(seen.read_text())
    assert called[1].endswith("dynamo_peer.py")
    assert called[called.index("--router-mode") + 1] == "kv_router"
    assert json.loads(called[called.index("--planner-json") + 1]) == {"enable_load_scaling": True}


def test_the_plain_dynamo_row_is_called_as_before(tmp_path: Path) -> None:
    fake, seen = recording_python(tmp_path)
    with pytest.raises(SystemExit, match="dynamo_peer.py failed"):
        evaluate.main(argv(tmp_path, "--policies", "--dynamo-python", str(fake)))
    called = json.loads(seen.read_text())
    assert called[called.index("--router-mode") + 1] == "round_robin" and "--planner-json" not in called


def test_a_merge_keeps_the_file_s_dynamo_row(tmp_path: Path) -> None:
    out = tmp_path / "e.json"
    assert evaluate.main(argv(tmp_path, "--policies", "static")) == 0
    doc = json.loads(out.read_text())
    doc["results"]["dynamo"] = doc["results"]["static"] | {"marker": "the file's own"}
    out.write_text(json.dumps(doc))
    fake = tmp_path / "python"
    fake.write_text(f"#!{sys.executable}\nimport sys\nsys.exit(3)\n")  # would fail the run if called
    fake.chmod(0o755)
    assert evaluate.main(argv(tmp_path, "--policies", "--merge", "--dynamo-python", str(fake))) == 0
    assert json.loads(out.read_text())["results"]["dynamo"]["marker"] == "the file's own"
