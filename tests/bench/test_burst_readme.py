"""bench/router/README.md's burst verdict table is what burst_readme.py makes of the result
files it names (no number in it typed by hand), and a stale table is caught."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "router"))

import burst_readme  # noqa: E402


def test_the_verdict_block_is_generated_from_the_files_it_names() -> None:
    text = burst_readme.README.read_text()
    files = burst_readme.files_in(text)
    assert files, "the block names no result file"
    assert burst_readme.rewrite(text, burst_readme.block(files)) == text, (
        "stale: run .venv/bin/python bench/router/burst_readme.py")


def test_a_changed_number_is_stale() -> None:
    text = burst_readme.README.read_text()
    files = burst_readme.files_in(text)
    inner = text.split(burst_readme.BEGIN, 1)[1].split(burst_readme.END, 1)[0]
    row = next(line for line in inner.splitlines() if line.startswith("| [burst"))
    cells = row.split(" | ")
    cells[3] = "0.01 [0.01..0.01]"  # the TTFT ratio cell
    tampered = text.replace(row, " | ".join(cells), 1)
    assert burst_readme.rewrite(tampered, burst_readme.block(files)) != tampered
