"""One client exchange as the completion handler sees it, whichever HTTP server took it.

The handler and the stream relay speak only these types; ``front_aiohttp.py`` adapts an
aiohttp request to them and ``lean_server.py`` its own protocol (``--http-server``). A
complete answer is a ``Reply``; a streamed one goes out through a ``StreamOut``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol


class ClientGone(Exception):
    """The client's connection is gone: nothing more can reach it."""


@dataclass
class Reply:
    """A complete (not streamed) answer."""

    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"


def json_reply(obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> Reply:
    return Reply(status, json.dumps(obj).encode(), dict(headers or {}))


def error_reply(status: int, message: str, err_type: str, param: str | None = None,
                headers: dict[str, str] | None = None) -> Reply:
    """OpenAI's error shape."""
    return json_reply({"error": {"message": message, "type": err_type, "param": param, "code": status}},
                      status, headers)


class StreamOut(Protocol):
    """A streamed (chunked, or until close for HTTP/1.0) 200 response being written.

    The relay's ``_Pipe`` writes to ``transport`` itself from the upstream read callback:
    ``take_head`` gives the response head still held (to go out in the same write as the
    first chunk), ``ends_inline`` says whether the pipe may end the chunked body itself
    (``mark_ended`` records that it did)."""

    status: int
    chunked: bool
    head_held: bool
    ends_inline: bool

    @property
    def transport(self) -> asyncio.Transport | None: ...

    def take_head(self) -> bytes: ...

    def send_head(self) -> None: ...

    def mark_ended(self) -> None: ...

    async def write(self, data: bytes) -> None:
        """One body piece, framed as the response needs; ClientGone when the client is gone."""

    async def write_eof(self) -> None:
        """End the body (a no-op once ended); ClientGone when the client is gone."""


class Exchange(Protocol):
    """The client's request. ``headers`` answers lower-case names."""

    path: str

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def transport(self) -> asyncio.Transport | None: ...

    async def read_body(self, limit: int) -> bytes:
        """The whole body; RequestError (400 or 413, naming the problem) when it is not acceptable."""

    async def open_stream(self, headers: dict[str, str], hold_head: bool) -> StreamOut:
        """Start the 200 streamed response; with ``hold_head`` its head waits for ``take_head``/``send_head``."""
