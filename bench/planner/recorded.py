"""A committed ``evaluate.py`` result file's own arguments (its ``meta.command``), for the tools that replay its
window again (``settings_sweep.py``, ``rerun.py``)."""

from __future__ import annotations

import shlex
from pathlib import Path

# Flags a replay of the window sets for itself, with how many values each takes (None: every value up to the next
# flag): where to write, the peer's python, which policies, and whether it merges (rerun.py adds its own --merge, and
# a recorded one would pile up a copy each time).
_OWN: dict[str, int | None] = {"--out": 1, "--dynamo-python": 1, "--policies": None, "--merge": 0}


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
    """``evaluate.py``'s arguments from a recorded command, without the flags a replay sets for itself (``_OWN``)."""
    cmd = shlex.split(command)
    start = next((i for i, a in enumerate(cmd) if a.endswith("evaluate.py")), None)
    if start is None:
        raise SystemExit(f"not an evaluate.py command: {command[:80]!r}")
    rest, out, i = cmd[start + 1:], [], 0
    while i < len(rest):
        if rest[i] in _OWN:
            arity, i = _OWN[rest[i]], i + 1
            while i < len(rest) and (arity is None or arity > 0) and not rest[i].startswith("--"):
                i, arity = i + 1, None if arity is None else arity - 1
        else:
            out.append(rest[i])
            i += 1
    return retarget(out, traces)
