"""Generated blocks in READMEs: replace the marked block, or check it is current.

Every README number comes from a result file: a generator renders its block (markers
included) and either writes it into the README or, with ``--check``, fails when the README
holds something else. One splice for all generators, so they agree on what "stale" means.
"""

from __future__ import annotations

import sys
from pathlib import Path


def replace_block(text: str, begin: str, end: str, block: str) -> str:
    """``text`` with everything from the first ``begin`` through the next ``end`` (markers
    included) replaced by ``block``, which carries its own markers. ``begin`` may be a prefix
    of the marker line, so a generator can reword the rest of its marker."""
    i = text.find(begin)
    j = text.find(end, i) if i >= 0 else -1
    if i < 0 or j < 0:
        raise ValueError(f"no '{begin}' ... '{end}' markers around a block to rewrite")
    return text[:i] + block + text[j + len(end):]


def write_or_check(path: Path, old: str, new: str, check: bool, stale: str) -> int:
    """Write ``new`` to ``path`` (exit status 0), or with ``check`` only compare: 1 and the
    ``stale`` message on stderr when the README is not what the result files render to."""
    if check:
        if new != old:
            print(f"{path}: {stale}", file=sys.stderr)
            return 1
        return 0
    if new != old:
        path.write_text(new)
    return 0
