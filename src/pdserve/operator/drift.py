"""Pure drift detection: does a live object still carry everything the operator rendered?

The API server adds defaults (probe thresholds, protocol, fieldRef apiVersion...),
so "in sync" means the rendered object is a subset of the live one, not equal to it.
Lists of scalars (args, command) are atomic in server-side apply and must match
exactly; lists of objects (containers, env, ports) match item by item in any order,
because other field managers may add items that a re-apply would not remove."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Only what the operator sets is compared; status and server-managed metadata never are.
COMPARED_KEYS = ("spec", "rules", "roleRef", "subjects")
COMPARED_METADATA = ("labels", "ownerReferences")


def _same_scalar(want: Any, have: Any) -> bool:
    if isinstance(want, bool) or isinstance(have, bool):
        return want is have
    if isinstance(want, (int, float)) and isinstance(have, (int, float)):
        return float(want) == float(have)
    # Quantities and int-or-string ports may come back in either form.
    return str(want) == str(have)


def differences(want: Any, have: Any, path: str = "") -> list[str]:
    """Paths where ``have`` lacks or contradicts something in ``want``."""
    if isinstance(want, Mapping):
        if not isinstance(have, Mapping):
            return [path or "."]
        out: list[str] = []
        for key, value in want.items():
            if key not in have:
                # The API server drops empty lists and maps; absent equals empty.
                if value in ([], {}):
                    continue
                out.append(f"{path}.{key}")
            else:
                out += differences(value, have[key], f"{path}.{key}")
        return out
    if isinstance(want, list):
        if not isinstance(have, list):
            return [path]
        if all(not isinstance(w, (Mapping, list)) for w in want):
            return [] if len(want) == len(have) and all(_same_scalar(w, h) for w, h in zip(want, have)) else [path]
        unused = list(have)
        for i, item in enumerate(want):
            match = next((h for h in unused if not differences(item, h)), None)
            if match is None:
                return [f"{path}[{i}]"]
            unused.remove(match)
        return []
    return [] if _same_scalar(want, have) else [path or "."]


def drift(desired: Mapping[str, Any], live: Mapping[str, Any] | None) -> list[str]:
    """Empty when ``live`` is in sync with ``desired``; otherwise the drifted paths."""
    if live is None:
        return ["<missing>"]
    out: list[str] = []
    for key in COMPARED_METADATA:
        if key in desired.get("metadata", {}):
            out += differences(desired["metadata"][key], (live.get("metadata") or {}).get(key), f".metadata.{key}")
    for key in COMPARED_KEYS:
        if key in desired:
            out += differences(desired[key], live.get(key), f".{key}")
    return out
