"""Issue 13's rule of thumb made a check: no module under src/ grows past 500 lines (split it instead)."""

from __future__ import annotations

from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "pdserve"
LIMIT = 500


def test_no_source_file_over_500_lines() -> None:
    sizes = {str(p.relative_to(SRC)): len(p.read_text().splitlines()) for p in SRC.rglob("*.py")}
    assert len(sizes) > 100  # the tree was found
    over = {name: n for name, n in sizes.items() if n > LIMIT}
    assert over == {}, f"split these modules: {over}"
