"""OpenAI chat messages -> the conversation a HF chat template renders (text models).

Follows vLLM's ``parse_chat_messages`` (``vllm/renderers/chat_utils/chat_message.py``
in 0.33; ``vllm/entrypoints/chat_utils.py`` in 0.11) for text content:

- ``content`` None -> no parts; a string -> one text part;
- text-like parts (``text``, ``input_text``, ``output_text``, ``refusal``, ``thinking``)
  are joined with ``"\\n"`` when the template takes string content, or kept as
  ``{"type": "text", "text": ...}`` dicts when it iterates over content parts
  ("openai" content format); a part with null text is skipped;
- assistant ``tool_calls`` (arguments JSON -> dict, empty list dropped), tool
  ``tool_call_id`` (a tool message's text parts flattened to a string), ``name``;
- a system message's Claude Code billing-header line is dropped (0.33);
- ``developer`` becomes ``system`` when the template has no developer role (0.33).

Media parts (images, audio, video) need the model's multimodal processor: they are
refused here, so the router never guesses a multimodal prompt's ids.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pdserve.tokenization.base import ChatTemplateError
from pdserve.tokenization.rules import ChatRules, rules_for

ContentFormat = Literal["string", "openai"]
TEXT_PART_TYPES = {"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal",
                   "thinking": "thinking"}
_CLAUDE_CODE_BILLING_HEADER = "x-anthropic-billing-header"


def _part_text(part: Any, where: str) -> str | None:
    if isinstance(part, str):
        return part
    if not isinstance(part, Mapping):
        raise ChatTemplateError(f"{where}: a content part must be an object or a string")
    ptype = part.get("type")
    if ptype is None:
        raise ChatTemplateError(f"{where}: Missing 'type' field in multimodal part.")
    if not isinstance(ptype, str):
        raise ChatTemplateError(f"{where}: Invalid 'type' field in multimodal part.")
    key = TEXT_PART_TYPES.get(ptype)
    if key is None:
        raise ChatTemplateError(f"{where}: content part type {ptype!r} is not supported by the router "
                                "(text-only tokenization; multimodal prompts need the model's processor)")
    text = part.get(key)
    if text is not None and not isinstance(text, str):
        raise ChatTemplateError(f"{where}.{key} must be a string")
    return text


def _strip_billing_header(parts: list[Any]) -> list[Any]:
    out: list[Any] = []
    for part in parts:
        text = part if isinstance(part, str) else (
            part.get("text") if isinstance(part, Mapping) and part.get("type") == "text" else None)
        if not (isinstance(text, str) and text.startswith(_CLAUDE_CODE_BILLING_HEADER)):
            out.append(part)
            continue
        rest = text.partition("\n")[2]
        if rest:
            out.append(rest if isinstance(part, str) else {**part, "text": rest})
    return out


def _tool_arguments(args: Any, lenient: bool) -> Any:
    if not args:
        return {}
    if isinstance(args, dict):
        return args
    parsed: Any = None
    if isinstance(args, str):
        try:
            parsed = json.loads(args)
        except json.JSONDecodeError as e:
            if not lenient:  # 0.11: json.loads raises, the request is refused
                raise ChatTemplateError(f"tool call arguments are not valid JSON: {e}") from e
            parsed = None  # 0.33 coerces malformed history arguments to {}
    if not lenient:
        return parsed if isinstance(args, str) else args
    return parsed if isinstance(parsed, dict) else {}


def parse_messages(messages: Sequence[Mapping[str, Any]], content_format: ContentFormat,
                   rules: ChatRules | None = None) -> list[dict[str, Any]]:
    rules = rules or rules_for(None)
    conversation: list[dict[str, Any]] = []
    for i, msg in enumerate(messages):
        where = f"messages[{i}].content"
        role = msg["role"]
        content = msg.get("content")
        if content is None:
            parts: list[Any] = []
        elif isinstance(content, str):
            parts = [{"type": "text", "text": content}]
        elif isinstance(content, list):
            parts = list(content)
        else:
            raise ChatTemplateError(f"{where} must be a string, a list of parts or null")
        if role == "system" and rules.strip_billing_header:
            parts = _strip_billing_header(parts)
        texts = [t for t in (_part_text(p, f"{where}[{j}]") for j, p in enumerate(parts)) if t is not None]
        out: dict[str, Any] = {"role": role}
        if content_format == "openai":
            out["content"] = [{"type": "text", "text": t} for t in texts]
        else:
            out["content"] = "\n".join(texts)
        if role == "assistant":
            tool_calls = msg.get("tool_calls")
            if tool_calls is not None:
                calls = _tool_calls(tool_calls, i, rules)
                if calls or not rules.drop_empty_tool_calls:
                    out["tool_calls"] = calls
            reasoning = msg.get("reasoning")
            if isinstance(reasoning, str) and rules.reasoning_field:
                out["reasoning"] = out["reasoning_content"] = reasoning
        elif role == "tool":
            if "tool_call_id" in msg:
                out["tool_call_id"] = msg["tool_call_id"]
            if isinstance(out["content"], list) and rules.flatten_tool_content:
                out["content"] = "\n".join(p["text"] for p in out["content"])
        if isinstance(msg.get("name"), str):
            out["name"] = msg["name"]
        if isinstance(msg.get("task"), str) and rules.task_field:
            out["task"] = msg["task"]
        if role == "developer" and rules.developer_to_system:
            out["tools"] = msg.get("tools")
        conversation.append(out)
    return conversation


def _tool_calls(tool_calls: Any, index: int, rules: ChatRules) -> list[dict[str, Any]]:
    if not isinstance(tool_calls, list):
        raise ChatTemplateError(f"messages[{index}].tool_calls must be a list")
    out = []
    for item in tool_calls:
        function = item.get("function") if isinstance(item, Mapping) else None
        if not isinstance(item, Mapping) or item.get("type", "function") != "function" or not isinstance(function, Mapping):
            raise ChatTemplateError("chat completions only support assistant tool_calls of type 'function'.")
        args = _tool_arguments(function.get("arguments"), rules.lenient_tool_arguments)
        out.append({**item, "function": {**function, "arguments": args}})
    return out


def developer_to_system(conversation: list[dict[str, Any]], chat_template: str,
                        rules: ChatRules | None = None) -> list[dict[str, Any]]:
    """vLLM 0.33: a template that never names "developer" gets system messages,
    consolidated into one at position 0 when one is not already first."""
    if rules is not None and not rules.developer_to_system:
        return conversation
    if '"developer"' in chat_template or "'developer'" in chat_template:
        return conversation
    if not any(m["role"] == "developer" for m in conversation):
        return conversation
    converted = []
    for m in conversation:
        if m["role"] == "developer":
            m = {k: v for k, v in m.items() if k != "tools"}
            m["role"] = "system"
        converted.append(m)
    system_texts: list[str] = []
    rest: list[dict[str, Any]] = []
    needs = False
    for i, m in enumerate(converted):
        if m["role"] == "system":
            if i > 0 or system_texts:
                needs = True
            c = m.get("content", "")
            if isinstance(c, list):
                c = "\n".join(p["text"] if isinstance(p, dict) else str(p) for p in c)
            if c:
                system_texts.append(c)
        else:
            rest.append(m)
    if not needs:
        return converted
    return [{"role": "system", "content": "\n\n".join(system_texts)}, *rest]
