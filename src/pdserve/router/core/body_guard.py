"""Decode a client's JSON body or refuse it with a 400 that names the problem.

Python's ``json`` accepts things a client error must not turn into a router crash
later: nesting deep enough to exhaust the C scanner's recursion (RecursionError),
escaped lone surrogates (``"\\ud800"`` decodes to a str that no UTF-8 encoder takes:
tokenizers and the upstream request raise UnicodeEncodeError), and the non-JSON
constants NaN / Infinity. Each becomes a ``RequestError`` naming the field.

The walk over the decoded value runs on every request and grows with the JSON's nodes
(measured here: ~3 µs for a one-message chat body, ~65 µs for 20 messages and 4 tool
schemas, 13 KB); ``_cannot_offend`` (~1 and ~10 µs: C scans of the bytes) skips it for
a body whose bytes rule both problems out (strict UTF-8, no ``\\uD800``-``\\uDFFF``
escape, no more brackets than the depth limit), which the walk would then pass anyway:
a false "may offend" only costs the walk.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pdserve.router.core.errors import RequestError

# Deep enough for any OpenAI request (content parts, tool JSON schemas), far below
# the interpreter's recursion limit.
MAX_DEPTH = 64


# A JSON escape of a UTF-16 surrogate: the only way, besides the raw bytes, to get one.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _cannot_offend(raw: bytes, max_depth: int) -> bool:
    """Whether the bytes alone prove the decoded value holds no lone surrogate and no
    nesting past ``max_depth`` (each level opens a bracket; strings only add to the count)."""
    if raw.count(b"[") + raw.count(b"{") > max_depth or _SURROGATE_ESCAPE.search(raw):
        return False
    if b"\x00" in raw[:4]:  # json reads such a body as UTF-16/32 (with surrogatepass)
        return False
    try:
        raw.decode("utf-8")  # strict: refuses encoded surrogates, which json's surrogatepass takes
    except UnicodeDecodeError:
        return False
    return True


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a valid JSON value")


# json.loads builds a new JSONDecoder (and its scanner) on every call given a keyword such
# as parse_constant; one decoder serves every request (~1.7 of ~4.5 µs per body).
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _path(parts: tuple[str | int, ...]) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else p)
    return out or "(body)"


def _check_str(s: str, parts: tuple[str | int, ...]) -> None:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as e:
        bad = s[e.start:e.end]
        raise RequestError(
            f"invalid request: {_path(parts)}: invalid Unicode: lone surrogate "
            f"{bad.encode('unicode_escape').decode()} at position {e.start}",
            param=str(parts[0]) if parts else None) from None


def check_value(value: Any, max_depth: int = MAX_DEPTH) -> None:
    """Walk a decoded JSON value (iteratively: a deep value must not recurse here either)."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(value, ())]
    while stack:
        v, parts = stack.pop()
        if len(parts) > max_depth:
            raise RequestError(f"invalid request: {_path(parts[:max_depth])}: JSON nested deeper than {max_depth} levels",
                               param=str(parts[0]) if parts else None)
        if isinstance(v, str):
            _check_str(v, parts)
        elif isinstance(v, dict):
            for k, item in v.items():
                _check_str(k, parts)
                stack.append((item, (*parts, k)))
        elif isinstance(v, list):
            stack.extend((item, (*parts, i)) for i, item in enumerate(v))


def load_json_body(raw: bytes, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads`` for a request body: every way it can fail is a 400."""
    try:
        # What json.loads does with bytes, then the shared decoder (same values, same errors).
        value = _DECODER.decode(raw.decode(json.detect_encoding(raw), "surrogatepass"))
    except RecursionError:
        raise RequestError(f"request body is not valid JSON: nested deeper than {max_depth} levels") from None
    except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError is a ValueError; so is a too-long int
        raise RequestError(f"request body is not valid JSON: {e}") from e
    if not _cannot_offend(raw, max_depth):
        check_value(value, max_depth)
    return value
