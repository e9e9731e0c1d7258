"""Server-sent-event framing for OpenAI streams (pure).

The relay forwards upstream bytes untouched and feeds them here only to learn token
boundaries (TTFT, ITL) and the text streamed so far (for migration).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

DONE = b"data: [DONE]\n\n"


@dataclass
class StreamTracker:
    """Incremental parser of an OpenAI SSE stream: text per choice, finish state."""

    kind: str  # "completions" | "chat"
    _buf: bytes = b""
    text: dict[int, list[str]] = field(default_factory=dict)
    finished: dict[int, str] = field(default_factory=dict)
    done: bool = False
    chunks: int = 0
    usage: dict[str, Any] | None = None
    stream_id: str | None = None
    model: str | None = None
    created: int | None = None
    error: dict[str, Any] | None = None
    collect: bool = False  # keep new pieces for drain() (migration re-framing)
    # Generated token ids per choice, when the stream carries them (vLLM's
    # ``return_token_ids``); a content chunk without them marks the choice incomplete.
    ids: dict[int, list[int]] = field(default_factory=dict)
    ids_missing: set[int] = field(default_factory=set)
    _pieces: list[tuple[int, str, str | None]] = field(default_factory=list)

    def feed(self, data: bytes) -> int:
        """Consume bytes; returns how many content-bearing events completed."""
        self._buf += data
        events = 0
        while True:
            cut = self._buf.find(b"\n\n")
            if cut < 0:
                break
            raw, self._buf = self._buf[:cut], self._buf[cut + 2 :]
            for line in raw.split(b"\n"):
                if line.startswith(b"data:"):
                    events += self._on_data(line[5:].strip())
        return events

    def _on_data(self, payload: bytes) -> int:
        if payload == b"[DONE]":
            self.done = True
            return 0
        try:
            obj = json.loads(payload)
        except ValueError:
            return 0
        if not isinstance(obj, dict):
            return 0
        if "error" in obj:
            self.error = obj["error"] if isinstance(obj["error"], dict) else {"message": str(obj["error"])}
            return 0
        self.stream_id = self.stream_id or obj.get("id")
        self.model = self.model or obj.get("model")
        self.created = self.created or obj.get("created")
        if obj.get("usage"):
            self.usage = obj["usage"]
        content = 0
        for ch in obj.get("choices") or []:
            idx = int(ch.get("index", 0))
            piece = ch.get("text") if self.kind == "completions" else (ch.get("delta") or {}).get("content")
            tids = ch.get("token_ids")
            if isinstance(tids, list) and all(isinstance(t, int) for t in tids):
                self.ids.setdefault(idx, []).extend(tids)
            elif piece:
                self.ids_missing.add(idx)
            if piece:
                self.text.setdefault(idx, []).append(piece)
                content = 1
            reason = ch.get("finish_reason")
            if reason:
                self.finished[idx] = reason
            if self.collect and (piece or reason):
                self._pieces.append((idx, piece or "", reason))
        self.chunks += content
        return content

    def drain(self) -> list[tuple[int, str, str | None]]:
        """(choice index, text, finish_reason) seen since the last drain."""
        out, self._pieces = self._pieces, []
        return out

    def text_of(self, index: int = 0) -> str:
        return "".join(self.text.get(index, ()))

    def ids_of(self, index: int = 0) -> list[int] | None:
        """The generated ids of a choice if every chunk carried them, else None."""
        return None if index in self.ids_missing else list(self.ids.get(index, []))

    @property
    def complete(self) -> bool:
        return self.done or bool(self.finished)


def frame(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def error_event(message: str, err_type: str = "ServiceUnavailableError", code: int = 503) -> bytes:
    return frame({"error": {"message": message, "type": err_type, "param": None, "code": code}})


def reframe(kind: str, text: str, finish_reason: str | None, tracker: StreamTracker, model: str) -> bytes:
    """A chunk in the client's original format carrying text from a continuation."""
    created = tracker.created or int(time.time())
    sid = tracker.stream_id or "cmpl-migrated"
    if kind == "chat":
        choice: dict[str, Any] = {"index": 0, "delta": {"content": text} if text else {}, "logprobs": None,
                                  "finish_reason": finish_reason}
        obj = {"id": sid, "object": "chat.completion.chunk", "created": created, "model": model, "choices": [choice]}
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
        obj = {"id": sid, "object": "text_completion", "created": created, "model": model, "choices": [choice]}
    return frame(obj)


def usage_event(kind: str, tracker: StreamTracker, model: str, usage: dict[str, Any]) -> bytes:
    obj: dict[str, Any] = {
        "id": tracker.stream_id or "cmpl-migrated",
        "object": "chat.completion.chunk" if kind == "chat" else "text_completion",
        "created": tracker.created or int(time.time()),
        "model": model,
        "choices": [],
        "usage": usage,
    }
    return frame(obj)


class PassThroughTracker:
    """The cheap tracker for the normal relay path. Per read it only counts content
    markers with C-level byte scans (no event splitting, no JSON); the raw bytes are kept
    so the text can be rebuilt with a full parse if, and only if, the stream must
    migrate, and the stream's last bytes tell whether it ended with ``[DONE]``.

    Reads may split anything anywhere: each scan runs over the previous read's last
    ``_TAIL`` bytes plus the new read, from the first offset at which a match would end
    inside the new read, so a marker cut in two is counted once. A token whose text is
    empty (``"text":""``) contains the content marker and cancels it out."""

    _TAIL = 32

    def __init__(self, kind: str, keep: bool = True) -> None:
        self.kind = kind
        self.keep = keep
        self._raw: list[bytes] = []
        # Starts as if after an event boundary, so a stream that is only [DONE] is seen.
        self._tail = b"\0" * (self._TAIL - 2) + b"\n\n"
        self.finished = False
        self.chunks = 0
        self._full: StreamTracker | None = None
        has, empty = (b'"text":"', b'"text":""') if kind == "completions" else (b'"content":"', b'"content":""')
        t = self._TAIL
        self._has, self._has_from = has, t - len(has) + 1
        self._empty, self._empty_from = empty, t - len(empty) + 1
        self._fin, self._fin_from = b'"finish_reason":"', t - len(b'"finish_reason":"') + 1

    def feed(self, data: bytes) -> int:
        """Consume one read; returns how many content-bearing events it completed."""
        if self.keep:
            self._raw.append(data)
        w = self._tail + data
        content = w.count(self._has, self._has_from) - w.count(self._empty, self._empty_from)
        if not self.finished and w.find(self._fin, self._fin_from) >= 0:
            self.finished = True
        self._tail = w[-self._TAIL :]
        self.chunks += content
        return content

    @property
    def done(self) -> bool:
        """The stream so far ends with a complete ``data: [DONE]`` event (checked on the
        last bytes only, when asked: once per stream)."""
        tail = self._tail
        if not tail.endswith(b"\n\n"):
            return False
        last = tail[:-2].rsplit(b"\n\n", 1)
        if len(last) < 2:
            return False  # the event began before the kept tail: longer than [DONE]
        return any(line.startswith(b"data:") and line[5:].strip() == b"[DONE]" for line in last[1].split(b"\n"))

    def parsed(self) -> StreamTracker:
        """A full StreamTracker over everything seen so far (parsed once, on demand)."""
        if self._full is None:
            full = StreamTracker(self.kind)
            full.feed(b"".join(self._raw))
            self._full = full
        return self._full

    @property
    def complete(self) -> bool:
        return self.done
