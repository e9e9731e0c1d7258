"""Where vLLM releases preprocess chat requests differently (read off each release).

- 0.11 (``vllm/entrypoints/openai/serving_engine.py::_preprocess_chat``): the template is
  rendered to text, then encoded with the request's ``add_special_tokens``; messages go
  to the template as parsed (``entrypoints/chat_utils.py``): no developer->system
  rewrite, a tool message's content parts stay parts in "openai" format, tool-call
  arguments must be valid JSON (else the request is refused), an empty ``tool_calls``
  list is kept. Mistral (``transformers_utils/tokenizers/mistral.py``): a final
  assistant message is always continued (``prefix=True``), assistant/tool text parts
  are joined with a blank line, ``add_generation_prompt``/``continue_final_message``
  are ignored.
- 0.33 (``vllm/renderers/hf.py``, ``renderers/chat_utils/chat_message.py``,
  ``tokenizers/mistral.py``): the rendered chat is encoded with the request's
  ``add_special_tokens`` (default False), as in 0.11; developer messages become system when the
  template never names "developer"; Claude Code's billing header line is dropped from
  system text; a tool message's text parts become one string; malformed tool-call
  arguments become ``{}``; an empty ``tool_calls`` is dropped; assistant ``reasoning`` is
  passed on. Mistral: ``ChatCompletionRequest.from_openai`` with
  ``continue_final_message``, and a final assistant message needs it.
"""

from __future__ import annotations

from dataclasses import dataclass

from pdserve.api.vllm_versions import DEFAULT_VERSION


@dataclass(frozen=True)
class ChatRules:
    version: str
    chat_add_special_tokens: bool  # the request's add_special_tokens reaches the encode
    developer_to_system: bool
    strip_billing_header: bool
    flatten_tool_content: bool
    lenient_tool_arguments: bool  # malformed JSON -> {} (else a 400)
    drop_empty_tool_calls: bool
    reasoning_field: bool
    task_field: bool
    mistral_from_openai: bool  # 0.33's MistralCommonBackend path; else 0.11's direct request


def rules_for(version: str | None) -> ChatRules:
    """The chat preprocessing rules of a vLLM release (``None``: pdserve's default version).
    Releases before 0.33 follow 0.11's rules, later ones 0.33's."""
    v = version or DEFAULT_VERSION
    try:
        major, minor = (int(x) for x in v.split(".")[:2])
    except ValueError:
        raise ValueError(f"vLLM version must look like 0.11.0, got {v!r}") from None
    legacy = (major, minor) < (0, 33)
    return ChatRules(
        version=v,
        # Both releases: the request's add_special_tokens reaches the encode of the rendered
        # chat (0.33: renderers/params.py TokenizeParams takes it from the request's
        # tokenization kwargs over the chat default False). Judged by vLLM's own renderer in
        # tests/conformance/test_token_ids.py, which found a single BOS here before.
        chat_add_special_tokens=True,
        developer_to_system=not legacy,
        strip_billing_header=not legacy,
        flatten_tool_content=not legacy,
        lenient_tool_arguments=not legacy,
        drop_empty_tool_calls=not legacy,
        reasoning_field=not legacy,
        task_field=not legacy,
        mistral_from_openai=not legacy,
    )
