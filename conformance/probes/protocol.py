"""Validate JSON bodies with vLLM's OpenAI protocol models.

0.11: ``vllm/entrypoints/openai/protocol.py``; 0.33: ``vllm/entrypoints/openai/completion/
protocol.py``, ``.../chat_completion/protocol.py``, ``vllm/entrypoints/serve/engine/protocol.py``.
Request: {"items": [{"model": "CompletionResponse" | ..., "body": {...}}]}.
Answer per item: "error" (the pydantic error, if any) and "extra": the paths of fields
vLLM's models do not declare (they accept extras, ``extra="allow"``, so validation alone
would not notice a field vLLM never sends).
"""

from __future__ import annotations

import importlib
from typing import Any

from common import error_text, main

MODELS = (
    "CompletionRequest", "ChatCompletionRequest", "CompletionResponse", "CompletionStreamResponse",
    "ChatCompletionResponse", "ChatCompletionStreamResponse", "ErrorResponse",
)
MODULES = (
    "vllm.entrypoints.openai.protocol",  # 0.11
    "vllm.entrypoints.openai.completion.protocol",  # 0.33
    "vllm.entrypoints.openai.chat_completion.protocol",
    "vllm.entrypoints.serve.engine.protocol",
)


def _models() -> dict[str, tuple[type, str]]:
    found: dict[str, tuple[type, str]] = {}
    for name in MODULES:
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        for m in MODELS:
            if m not in found and hasattr(mod, m):
                found[m] = (getattr(mod, m), name)
    missing = set(MODELS) - set(found)
    if missing:
        raise ImportError(f"vLLM protocol models not found: {sorted(missing)}")
    return found


def _extras(obj: Any, path: str) -> list[str]:
    from pydantic import BaseModel

    out: list[str] = []
    if isinstance(obj, BaseModel):
        out += [f"{path}.{k}" for k in (obj.model_extra or {})]
        for name in type(obj).model_fields:
            out += _extras(getattr(obj, name), f"{path}.{name}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            out += _extras(v, f"{path}[{i}]")
    return out


def handle(request: dict[str, Any]) -> dict[str, Any]:
    models = _models()
    results = []
    for item in request["items"]:
        cls, module = models[item["model"]]
        try:
            obj = cls.model_validate(item["body"])
        except Exception as e:
            results.append({"error": error_text(e), "module": module})
            continue
        results.append({"error": None, "extra": _extras(obj, item["model"]), "module": module})
    return {"results": results, "modules": {m: mod for m, (_, mod) in models.items()}}


if __name__ == "__main__":
    main(handle)
