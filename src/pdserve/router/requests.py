"""Validation of client requests at the router's front door (pydantic) and the
prompt's token ids, which the router needs for prefix matching.

Only what the router relies on is checked strictly; everything else passes through
to the worker untouched (extra fields are allowed), as vLLM will judge them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError

from pdserve.common import tokenizer
from pdserve.common.hashing import block_hashes, to_external

Kind = Literal["completions", "chat"]


class RequestError(Exception):
    """A client error, rendered as an OpenAI-style error object."""

    def __init__(self, message: str, status: int = 400, err_type: str = "BadRequestError", param: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.headers = headers or {}
        self.message = message
        self.status = status
        self.err_type = err_type
        self.param = param

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.err_type, "param": self.param, "code": self.status}}


class _Common(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str | None = None
    stream: StrictBool = False
    max_tokens: StrictInt | None = Field(default=None, ge=0)
    max_completion_tokens: StrictInt | None = Field(default=None, ge=0)
    n: StrictInt = Field(default=1, ge=1, le=128)
    stream_options: dict[str, Any] | None = None
    kv_transfer_params: dict[str, Any] | None = None


class CompletionBody(_Common):
    prompt: str | list[StrictInt] | list[str] | list[list[StrictInt]]


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: str | list[dict[str, Any]] | None = None


class ChatBody(_Common):
    messages: list[ChatMessage] = Field(min_length=1)


@dataclass(frozen=True, slots=True)
class ParsedRequest:
    kind: Kind
    body: dict[str, Any]  # the client's JSON, unchanged
    model: str | None
    stream: bool
    prompt_ids: list[int]
    include_usage: bool
    raw: bytes = b""  # the client's body, forwarded as is when nothing needs rewriting

    @property
    def n(self) -> int:
        return int(self.body.get("n") or 1)


def parse_request(raw: bytes, kind: Kind) -> ParsedRequest:
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise RequestError(f"request body is not valid JSON: {e}") from e
    if not isinstance(body, dict):
        raise RequestError(f"request body must be a JSON object, got {type(body).__name__}")
    model_cls = ChatBody if kind == "chat" else CompletionBody
    try:
        parsed = model_cls.model_validate(body)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        param = str(err["loc"][0]) if err["loc"] else None
        raise RequestError(f"invalid request: {loc}: {err['msg']}", param=param) from e
    if isinstance(parsed, CompletionBody):
        prompt = parsed.prompt
        if isinstance(prompt, list) and len(prompt) == 0:
            raise RequestError("invalid request: prompt: must not be empty", param="prompt")
        if isinstance(prompt, list) and not isinstance(prompt[0], int):
            # A batch of prompts stays together on one worker; match on the first.
            prompt = prompt[0]
        ids = tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
    else:
        try:
            text = tokenizer.apply_chat_template([m.model_dump(exclude_none=True) for m in parsed.messages])
        except (TypeError, ValueError) as e:
            raise RequestError(f"invalid request: messages: {e}", param="messages") from e
        ids = tokenizer.encode(text)
    include_usage = bool((parsed.stream_options or {}).get("include_usage"))
    return ParsedRequest(kind, body, parsed.model, parsed.stream, ids, include_usage, raw)


def prompt_block_hashes(ids: list[int], block_size: int) -> list[int]:
    """vLLM's prefix-cache block hashes in the 64-bit form its KV events carry."""
    return [to_external(h) for h in block_hashes(ids, block_size)]
