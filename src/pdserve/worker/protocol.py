"""OpenAI / vLLM request models and response shapes for the mock worker's HTTP API.

Field names, defaults and error bodies follow vLLM 0.11's OpenAI-compatible server
(``vllm/entrypoints/openai/protocol.py``); fields the mock cannot honour (n > 1,
beam search) are rejected with a 400 that names the parameter, and sampling knobs
that do not change a mock's output (temperature, top_p, ...) are validated and ignored.
"""

from __future__ import annotations

import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from pdserve.common.openai_protocol import ChatFields, CompletionFields


class ApiError(Exception):
    """An error that becomes vLLM's ``{"error": {...}}`` body."""

    def __init__(self, status: int, message: str, param: str | None = None, err_type: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.err_type = err_type or _ERROR_TYPES.get(status, "InternalServerError")

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.err_type, "param": self.param, "code": self.status}}


_ERROR_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    413: "RequestEntityTooLarge",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}


def bad_request(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, param)


def from_validation_error(err: ValidationError) -> ApiError:
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first.get("loc", ()))
    msg = first.get("msg", "invalid value")
    return ApiError(400, f"{loc}: {msg}" if loc else msg, loc.split(".")[0] if loc else None)


class _Sampling(BaseModel):
    """Parameters shared by completions and chat completions that only the worker reads (the fields the
    router reads too are ``pdserve.common.openai_protocol``'s)."""

    model_config = ConfigDict(extra="allow")

    min_tokens: int = Field(default=0, ge=0)
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    seed: int | None = None
    temperature: float | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = None
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    use_beam_search: bool = False
    user: str | None = None

    @field_validator("n", check_fields=False)  # ``n`` is declared by the shared fields
    @classmethod
    def _only_n1(cls, v: int) -> int:
        if v != 1:
            raise ValueError("only n=1 is supported by the mock worker")
        return v

    @field_validator("use_beam_search")
    @classmethod
    def _no_beam(cls, v: bool) -> bool:
        if v:
            raise ValueError("beam search is not supported by the mock worker")
        return v

    def stop_strings(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else [s for s in self.stop if s]


class CompletionRequest(_Sampling, CompletionFields):
    echo: bool = False
    logprobs: int | None = None


class ChatCompletionRequest(_Sampling, ChatFields):
    logprobs: bool | None = False


def parse(model: type[BaseModel], body: Any) -> Any:
    if not isinstance(body, dict):
        raise bad_request("request body must be a JSON object")
    try:
        return model.model_validate(body)
    except ValidationError as err:
        raise from_validation_error(err) from None


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": None,
    }


def completion_response(
    rid: str, model: str, created: int, text: str, finish: str | None, stop_reason: str | int | None,
    n_prompt: int, n_out: int, kv_transfer_params: dict[str, Any] | None,
) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [
            {"index": 0, "text": text, "logprobs": None, "finish_reason": finish,
             "stop_reason": stop_reason, "prompt_logprobs": None}
        ],
        "service_tier": None,
        "system_fingerprint": None,
        "usage": usage(n_prompt, n_out),
        "kv_transfer_params": kv_transfer_params,
    }


def chat_response(
    rid: str, model: str, created: int, text: str, finish: str | None, stop_reason: str | int | None,
    n_prompt: int, n_out: int, kv_transfer_params: dict[str, Any] | None,
    reasoning_field: str = "reasoning",
) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": None, "annotations": None,
                            "audio": None, "function_call": None, "tool_calls": [], reasoning_field: None},
                "logprobs": None,
                "finish_reason": finish,
                "stop_reason": stop_reason,
            }
        ],
        "service_tier": None,
        "system_fingerprint": None,
        "usage": usage(n_prompt, n_out),
        "prompt_logprobs": None,
        "kv_transfer_params": kv_transfer_params,
    }


def completion_chunk(rid: str, model: str, created: int, text: str, finish: str | None,
                     stop_reason: str | int | None) -> dict[str, Any]:
    return {
        "id": rid, "object": "text_completion", "created": created, "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": stop_reason}],
    }


def chat_chunk(rid: str, model: str, created: int, delta: dict[str, Any], finish: str | None,
               stop_reason: str | int | None) -> dict[str, Any]:
    return {
        "id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish, "stop_reason": stop_reason}],
    }


def usage_chunk(rid: str, obj: str, model: str, created: int, n_prompt: int, n_out: int) -> dict[str, Any]:
    return {"id": rid, "object": obj, "created": created, "model": model, "choices": [], "usage": usage(n_prompt, n_out)}
