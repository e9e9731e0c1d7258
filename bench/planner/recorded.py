"""A committed ``evaluate.py`` result file's own arguments (its ``meta.command``), for the tools that replay its
window again (``settings_sweep.py``, ``rerun.py``)."""

from __future__ import annotations

import shlex
from pathlib import Path

# Flags a replay of the window sets for itself (with their value): where to write, which policies, the peer's python.
_OWN = ("--out", "--dynamo-python")


def retarget(argv: list[str], traces: Path | None) -> list[str]:
    """The recorded trace path, or the same file under ``traces`` (its folder and name) where it is not here."""
    if traces is None or "--trace" not in argv:
        return argv
    i = argv.index("--trace") + 1
    recorded = Path(argv[i])
    if not recorded.exists():
        argv = [*argv[:i], str(traces / recorded.parent.name / recorded.name), *argv[i + 1:]]
    return argv


def recorded_argv(command: str, traces: Path | None) -> list[str]:
    """``evaluate.py``'s arguments from a recorded command, without --out, --policies, --dynamo-python and --merge
    (a replay says for itself whether it merges: rerun.py adds one, and a recorded one would pile up a copy each)."""
    cmd = shlex.split(command)
    start = next((i for i, a in enumerate(cmd) if a.endswith("evaluate.py")), None)
    if start is None:
        raise SystemExit(f"not an evaluate.py command: {command[:80]!r}")
    rest, out, i = cmd[start + 1:], [], 0
    while i < len(rest):
        if rest[i] in _OWN:
            i += 2
        elif rest[i] == "--merge":
            i += 1
        elif rest[i] == "--policies":
            i += 1
            while i < len(rest) and not rest[i].startswith("--"):
                i += 1
        else:
            out.append(rest[i])
            i += 1
    return retarget(out, traces)
