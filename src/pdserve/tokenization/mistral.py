"""Mistral tokenizers (``--tokenizer-mode mistral``) via ``mistral-common``.

vLLM hands Mistral chats to mistral-common instead of a Jinja template: the OpenAI
messages become a ``ChatCompletionRequest`` (``from_openai``, with
``continue_final_message``) and ``encode_chat_completion`` gives the ids (it writes
BOS and the [INST] markers). vLLM 0.33 (``vllm/tokenizers/mistral.py``) refuses a
chat that ends with an assistant message unless ``continue_final_message`` is set,
``continue_final_message`` unless the last message is the assistant's, and any
``chat_template``/``chat_template_kwargs``. Completions: ``encode(text,
bos=add_special_tokens, eos=False)``.

Sources: a tokenizer file (``tekken*.json``, ``tokenizer.model.v*``), a directory
holding one, or a hub id (``MistralTokenizer.from_hf_hub``). ``shipped_tokenizer_path``
names the real tokenizers that the mistral-common wheel ships (test fixtures).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pdserve.tokenization.base import ChatOptions, ChatTemplateError, ModelTokenizer, TokenizerLoadError
from pdserve.tokenization.rules import ChatRules, rules_for

SHIPPED = {
    "tekken": "tekken_240911.json",
    "tekken-240718": "tekken_240718.json",
    "v1": "tokenizer.model.v1",
    "v2": "mistral_instruct_tokenizer_240216.model.v2",
    "v3": "mistral_instruct_tokenizer_240323.model.v3",
    "v7": "mistral_instruct_tokenizer_241114.model.v7",
}


def shipped_tokenizer_path(name: str = "v3") -> Path:
    """Path of a tokenizer file inside the installed mistral-common package."""
    import mistral_common

    try:
        fname = SHIPPED[name]
    except KeyError:
        raise KeyError(f"unknown shipped Mistral tokenizer {name!r}; known: {sorted(SHIPPED)}") from None
    return Path(mistral_common.__file__).parent / "data" / fname


def _find_file(directory: Path) -> Path | None:
    for pattern in ("tekken.json", "tekken*.json", "tokenizer.model.v*", "*.model.v*", "tokenizer.model"):
        found = sorted(directory.glob(pattern))
        if found:
            return found[-1]
    return None


class MistralTokenizer(ModelTokenizer):
    def __init__(self, mistral: Any, name: str, rules: ChatRules | None = None) -> None:
        self._m = mistral
        self.rules = rules or rules_for(None)
        self._tok = mistral.instruct_tokenizer.tokenizer
        self.name = name
        self.mode = "mistral"
        self.vocab_size = int(self._tok.n_words)
        self.eos_token_id = int(self._tok.eos_id)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        if not isinstance(text, str):
            raise TypeError(f"encode expects str, got {type(text).__name__}")
        return list(self._tok.encode(text, bos=add_special_tokens, eos=False))

    def completion_ids(self, text: str, add_special_tokens: bool = True) -> list[int]:
        if not self.rules.mistral_from_openai:
            # 0.11 tokenizes a completion through MistralTokenizer.__call__ -> encode_one ->
            # encode(text) with add_special_tokens=None, i.e. bos=True whatever the request says
            # (transformers_utils/tokenizers/mistral.py); found by tests/conformance/test_token_ids.py.
            return list(self._tok.encode(text, bos=True, eos=False))
        return self.encode(text, add_special_tokens=add_special_tokens)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy

        policy = SpecialTokenPolicy.IGNORE if skip_special_tokens else SpecialTokenPolicy.KEEP
        return str(self._tok.decode(list(ids), special_token_policy=policy))

    def _chat_ids(self, messages: Sequence[Mapping[str, Any]], opts: ChatOptions) -> list[int]:
        from mistral_common.exceptions import MistralCommonException
        from mistral_common.protocol.instruct.request import ChatCompletionRequest

        if not self.rules.mistral_from_openai:
            return self._chat_ids_011(messages, opts.tools)
        if opts.chat_template_kwargs is not None:
            raise ChatTemplateError("chat_template is not supported for Mistral tokenizers.")
        last_role = messages[-1].get("role")
        if opts.add_generation_prompt and last_role == "assistant":
            raise ChatTemplateError("Cannot set `add_generation_prompt` to True when the last message is from the "
                                    "assistant. Consider using `continue_final_message` instead.")
        if opts.continue_final_message and last_role != "assistant":
            raise ChatTemplateError("Cannot set `continue_final_message` to True when the last message is not "
                                    "from the assistant.")
        try:
            request = ChatCompletionRequest.from_openai(
                messages=[dict(m) for m in messages], tools=opts.tools, continue_final_message=opts.continue_final_message)
            return list(self._m.encode_chat_completion(request).tokens)
        except (AssertionError, ValueError, TypeError, MistralCommonException) as e:
            raise ChatTemplateError(f"mistral-common refused the request: {e}") from e


    def _chat_ids_011(self, messages: Sequence[Mapping[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
        """vLLM 0.11's ``make_mistral_chat_completion_request``: a final assistant message is
        continued, assistant/tool text parts joined by a blank line, generation flags ignored."""
        from mistral_common.exceptions import MistralCommonException
        from mistral_common.protocol.instruct.request import ChatCompletionRequest

        msgs = [dict(m) for m in messages]
        if msgs[-1].get("role") == "assistant":
            msgs[-1]["prefix"] = True
        for m in msgs:
            m.pop("reasoning_content", None)
            if m.get("role") in ("assistant", "tool") and isinstance(m.get("content"), list):
                m["content"] = _aggregate_content(m["content"])
        if tools:
            tools = [dict(t) for t in tools]
            for t in tools:
                if t.get("type") == "function" and isinstance(t.get("function"), Mapping):
                    fn = dict(t["function"])
                    fn.setdefault("parameters", {})
                    fn["parameters"] = fn["parameters"] if fn["parameters"] is not None else {}
                    fn["description"] = fn.get("description") or ""
                    t["function"] = fn
        try:
            return list(self._m.encode_chat_completion(ChatCompletionRequest(messages=msgs, tools=tools)).tokens)
        except (AssertionError, ValueError, TypeError, MistralCommonException) as e:
            raise ChatTemplateError(f"mistral-common refused the request: {e}") from e


def _aggregate_content(content: list[Any]) -> Any:
    out: list[dict[str, Any]] = []
    for chunk in content:
        if isinstance(chunk, Mapping) and chunk.get("type") == "text" and out and out[-1].get("type") == "text":
            out[-1] = {**out[-1], "text": out[-1]["text"] + "\n\n" + chunk.get("text", "")}
        else:
            out.append(dict(chunk) if isinstance(chunk, Mapping) else chunk)
    if len(out) == 1 and out[0].get("type") == "text":
        return out[0]["text"]
    return out


def load_mistral(source: str, *, revision: str | None, hf_token: str | None,
                 rules: ChatRules | None = None) -> MistralTokenizer:
    try:
        from mistral_common.tokens.tokenizers.mistral import MistralTokenizer as _MT
    except ImportError as e:  # pragma: no cover - a dependency of pdserve
        raise TokenizerLoadError(f"--tokenizer-mode mistral needs mistral-common: {e}") from e
    path = Path(source)
    try:
        if path.is_file():
            return MistralTokenizer(_MT.from_file(str(path)), source, rules)
        if path.is_dir():
            found = _find_file(path)
            if found is None:
                raise TokenizerLoadError(f"no Mistral tokenizer file (tekken.json, tokenizer.model.v*) in {source}")
            return MistralTokenizer(_MT.from_file(str(found)), source, rules)
        token = hf_token or os.environ.get("HF_TOKEN") or None
        return MistralTokenizer(_MT.from_hf_hub(source, token=token, revision=revision), source, rules)
    except TokenizerLoadError:
        raise
    except Exception as e:
        raise TokenizerLoadError(f"cannot load Mistral tokenizer {source!r}: {type(e).__name__}: {e}") from e
