"""The OpenAI / vLLM request fields that both the router's front door and the mock worker read: one set of
pydantic models, typed as vLLM's own (``vllm/entrypoints/openai/protocol.py``: pydantic's default, lax
mode with ``extra="allow"``).

So the router accepts what a vLLM worker accepts for the fields it reads (``"stream": "true"`` or
``"max_tokens": "5"`` are valid to both; ``"max_tokens": "lots"`` to neither), and both read
``stream_options`` with vLLM's defaults (``{}`` asks for usage). Each side subclasses for its own rules:
the worker adds the sampling knobs and refuses what a mock cannot do, the router bounds ``n``.
Everything else passes through untouched (extra fields are allowed), as vLLM judges it.
``tests/conformance`` pins the shapes against vLLM's models.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class StreamOptions(BaseModel):
    # vLLM: ``include_usage: Optional[bool] = True``, and a request with stream_options reads it as given.
    include_usage: bool | None = True
    continuous_usage_stats: bool | None = False


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: str | list[dict[str, Any]] | None = None


class RequestFields(BaseModel):
    """Fields of both endpoints."""

    model_config = ConfigDict(extra="allow")
    model: str | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = None
    n: int = 1
    kv_transfer_params: dict[str, Any] | None = None
    cache_salt: str | None = None  # vLLM: a salt in the first block's hash, isolating the prefix cache

    @property
    def include_usage(self) -> bool:
        """Whether a stream ends with a usage chunk (vLLM: only when stream_options says so)."""
        return bool(self.stream_options is not None and self.stream_options.include_usage)


class CompletionFields(RequestFields):
    prompt: str | list[int] | list[str] | list[list[int]]
    add_special_tokens: bool = True  # vLLM's default for completions (BOS added)


class ChatFields(RequestFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    add_special_tokens: bool = False  # vLLM's default for chat: the template adds them
    tools: list[dict[str, Any]] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
