"""Validation of client requests at the router's front door (pydantic) and the
prompt's token ids, which the router needs for prefix matching.

The ids are the served model's, computed as vLLM's OpenAI server computes them
(``pdserve.tokenization``): completions with ``add_special_tokens`` (default true),
chats through the chat template with ``add_generation_prompt`` (default true),
``continue_final_message``, ``add_special_tokens`` (default false), ``tools`` and
``chat_template_kwargs``. Only what the router relies on is checked, with the
models the mock worker reads too (``pdserve.common.openai_protocol``, typed as vLLM's);
everything else passes through to the worker untouched (extra fields are allowed),
as vLLM will judge them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from pdserve.common.openai_protocol import ChatFields, CompletionFields
from pdserve.tokenization import ChatTemplateError, ModelTokenizer
from pdserve.router.core.body_guard import load_json_body
from pdserve.router.core.errors import RequestError

Kind = Literal["completions", "chat"]


class _Bounds(BaseModel):
    """The router's own limits on top of vLLM's fields."""

    max_tokens: int | None = Field(default=None, ge=0)
    max_completion_tokens: int | None = Field(default=None, ge=0)
    n: int = Field(default=1, ge=1, le=128)


class CompletionBody(_Bounds, CompletionFields):
    pass


class ChatBody(_Bounds, ChatFields):
    pass


@dataclass(frozen=True, slots=True)
class ParsedRequest:
    kind: Kind
    body: dict[str, Any]  # the client's JSON, unchanged
    model: str | None
    stream: bool
    prompt_ids: list[int]
    include_usage: bool
    raw: bytes = b""  # the client's body, forwarded as is when nothing needs rewriting
    cache_salt: str | None = None  # vLLM keys the first block with it

    @property
    def n(self) -> int:
        return int(self.body.get("n") or 1)


def parse_request(raw: bytes, kind: Kind, tokenizer: ModelTokenizer) -> ParsedRequest:
    body = load_json_body(raw)
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
        if isinstance(prompt, str):
            ids = tokenizer.completion_ids(prompt, add_special_tokens=parsed.add_special_tokens)
        else:
            # The worker judges ids: vLLM accepts up to the model's vocab size, which can exceed
            # the tokenizer's (padded embeddings), so the router must not be stricter.
            ids = list(prompt)
    else:
        try:
            ids = tokenizer.chat_ids(
                [m.model_dump(exclude_none=True) for m in parsed.messages],
                add_generation_prompt=parsed.add_generation_prompt,
                continue_final_message=parsed.continue_final_message,
                add_special_tokens=parsed.add_special_tokens,
                tools=parsed.tools,
                chat_template_kwargs=parsed.chat_template_kwargs,
            )
        except (ChatTemplateError, TypeError) as e:
            raise RequestError(f"invalid request: messages: {e}", param="messages") from e
    return ParsedRequest(kind, body, parsed.model, parsed.stream, ids, parsed.include_usage, raw, parsed.cache_salt)
