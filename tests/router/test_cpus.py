"""--processes defaults from the container's CPU: cgroup v2 / v1 quota files, else usable CPUs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pdserve.router.shell.cpus import cgroup_cpus, default_processes, parse_cpu_quantity, processes_for_cpu


def _files(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.mark.parametrize(("files", "cpus"), [
    ({"cpu.max": "400000 100000\n"}, 4.0),  # v2: 4 CPUs
    ({"cpu.max": "150000 100000\n"}, 1.5),
    ({"cpu.max": "max 100000\n"}, None),  # v2, no limit
    ({"cpu/cpu.cfs_quota_us": "200000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 2.0),  # v1, split mount
    ({"cpu,cpuacct/cpu.cfs_quota_us": "50000\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n"}, 0.5),
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),  # v1, no limit
    ({}, None),  # no cgroup visible
    ({"cpu.max": "garbage"}, None),
])
def test_cgroup_quota(tmp_path: Path, files: dict[str, str], cpus: float | None) -> None:
    assert cgroup_cpus(_files(tmp_path, files)) == cpus


def test_default_processes_is_whole_quota_cpus_capped_by_usable_cpus(tmp_path: Path) -> None:
    assert default_processes(_files(tmp_path / "a", {"cpu.max": "350000 100000"}), host=lambda: 16)[0] == 3
    assert default_processes(_files(tmp_path / "b", {"cpu.max": "50000 100000"}), host=lambda: 16)[0] == 1
    assert default_processes(_files(tmp_path / "c", {"cpu.max": "800000 100000"}), host=lambda: 2)[0] == 2
    n, why = default_processes(_files(tmp_path / "d", {"cpu.max": "max 100000"}), host=lambda: 6)
    assert n == 6 and "no cgroup CPU quota" in why


@pytest.mark.parametrize(("q", "cores", "procs"), [("250m", 0.25, 1), ("1", 1.0, 1), (2, 2.0, 2), ("1500m", 1.5, 1),
                                                    ("4", 4.0, 4), ("3.9", 3.9, 3)])
def test_cpu_request_to_processes(q: str | int, cores: float, procs: int) -> None:
    assert parse_cpu_quantity(q) == pytest.approx(cores)
    assert processes_for_cpu(q) == procs


def test_the_cli_reports_the_default_it_chose() -> None:
    # A flag the parser refuses after the default is resolved: the process says what it chose, then exits 2.
    r = subprocess.run([sys.executable, "-m", "pdserve.cli", "router", "--decode", "http://127.0.0.1:1",
                        "--tokenizer-mode", "mock", "--max-retries", "-1"], capture_output=True, text=True, timeout=60)
    n, _ = default_processes()
    assert r.returncode == 2 and f"--processes {n} (" in r.stderr, r.stderr
