"""Prompt token ids as vLLM's OpenAI server computes them, for a local tokenizer directory.

0.11: the tokenizer from ``vllm/transformers_utils/tokenizer.py`` (``get_tokenizer``); chat
through ``OpenAIServing._preprocess_chat`` (``vllm/entrypoints/openai/serving_engine.py``:
``vllm/entrypoints/chat_utils.py`` content-format detection, message parsing,
``apply_hf_chat_template``, then tokenization), completions through the server's
``CompletionRenderer.render_prompt`` (``vllm/entrypoints/renderer.py``).
0.33: ``OnlineRenderer.render_completion`` / ``render_chat``
(``vllm/renderers/online_renderer.py``) over ``renderer_from_config`` (``vllm/renderers/
registry.py``), built from the VllmConfig of the same directory.
Request: {"model_dir", "tokenizer_mode", "cases": [{"kind": "completion", "body": {...}} |
{"kind": "chat", "body": {...}}]} with OpenAI request bodies. Answer per case: "ids" or "error".
"""

from __future__ import annotations

import asyncio
from typing import Any

from common import error_text, main, use_cpu_platform


def _engine_args(model_dir: str, mode: str) -> Any:
    from vllm.engine.arg_utils import EngineArgs

    return EngineArgs(model=model_dir, tokenizer=model_dir, tokenizer_mode=mode, max_model_len=4096)


async def _v011(model_dir: str, mode: str, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from vllm.entrypoints.openai.protocol import ChatCompletionRequest
    from vllm.entrypoints.openai.serving_engine import OpenAIServing
    from vllm.entrypoints.renderer import RenderConfig
    from vllm.transformers_utils.tokenizer import get_tokenizer

    model_config = _engine_args(model_dir, mode).create_model_config()
    tokenizer = get_tokenizer(model_dir, tokenizer_mode=mode)
    serving = OpenAIServing(None, model_config, None, request_logger=None)  # type: ignore[arg-type]
    out = []
    for case in cases:
        body = case["body"]
        try:
            if case["kind"] == "completion":
                prompts = await serving._get_renderer(tokenizer).render_prompt(
                    prompt_or_prompts=body["prompt"],
                    config=RenderConfig(add_special_tokens=body.get("add_special_tokens", True)))
                ids = prompts[0]["prompt_token_ids"]
            else:
                req = ChatCompletionRequest.model_validate(body)
                _, _, prompts = await serving._preprocess_chat(
                    req, tokenizer, req.messages, chat_template=None, chat_template_content_format="auto",
                    add_generation_prompt=req.add_generation_prompt,
                    continue_final_message=req.continue_final_message,
                    chat_template_kwargs=req.chat_template_kwargs, add_special_tokens=req.add_special_tokens)
                ids = prompts[0]["prompt_token_ids"]
            out.append({"ids": list(ids)})
        except Exception as e:
            out.append({"error": error_text(e)})
    return out


async def _v033(model_dir: str, mode: str, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.entrypoints.openai.completion.protocol import CompletionRequest
    from vllm.renderers.online_renderer import OnlineRenderer
    from vllm.renderers.registry import renderer_from_config

    config = _engine_args(model_dir, mode).create_engine_config()
    online = OnlineRenderer(config.model_config, renderer_from_config(config), request_logger=None,
                            chat_template=None, chat_template_content_format="auto")
    out = []
    for case in cases:
        body = case["body"]
        try:
            if case["kind"] == "completion":
                res = await online.render_completion(CompletionRequest.model_validate(body))
                inputs = res
            else:
                res = await online.render_chat(ChatCompletionRequest.model_validate(body))
                inputs = res if not isinstance(res, tuple) else res[1]
            if not isinstance(inputs, list):  # ErrorResponse
                out.append({"error": str(getattr(inputs, "error", inputs))})
                continue
            first = inputs[0]
            ids = first["prompt_token_ids"] if isinstance(first, dict) else first.prompt_token_ids
            out.append({"ids": list(ids)})
        except Exception as e:
            out.append({"error": error_text(e)})
    return out


def handle(request: dict[str, Any]) -> dict[str, Any]:
    use_cpu_platform()
    try:
        import vllm.renderers.online_renderer  # noqa: F401

        impl = _v033
    except ImportError:
        impl = _v011
    results = asyncio.run(impl(request["model_dir"], request.get("tokenizer_mode", "auto"), request["cases"]))
    return {"results": results}


if __name__ == "__main__":
    main(handle)
