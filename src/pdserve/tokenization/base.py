"""The tokenizer interface the router (and the mock worker) program against.

A ``ModelTokenizer`` turns a request into the token ids the *model* sees, exactly as
vLLM's OpenAI server does for the same tokenizer: completions are encoded with
``add_special_tokens=True`` (vLLM's default for ``/v1/completions``), chat requests go
through the chat template with the generation prompt and are then encoded without
adding special tokens again (the template writes them).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

TokenizerMode = Literal["auto", "hf", "slow", "mistral", "mock"]
TOKENIZER_MODES: tuple[str, ...] = ("auto", "hf", "slow", "mistral", "mock")


class TokenizerLoadError(RuntimeError):
    """The tokenizer could not be loaded (missing files, unreachable hub, bad mode)."""


class ChatTemplateError(ValueError):
    """The request cannot be rendered (bad messages, template error): a client error."""


@dataclass(frozen=True, slots=True)
class ChatOptions:
    """A chat request's rendering fields (vLLM's ``ChatCompletionRequest``), handed to every mode as one."""

    add_generation_prompt: bool = True
    continue_final_message: bool = False
    add_special_tokens: bool = False
    tools: list[dict[str, Any]] | None = None
    chat_template_kwargs: Mapping[str, Any] | None = None


class ModelTokenizer(ABC):
    """A served model's tokenizer. ``vocab_size`` is one past the largest id the
    model knows: vLLM rejects prompt ids ``>= vocab_size`` as out of vocabulary."""

    name: str
    mode: str
    vocab_size: int
    eos_token_id: int | None

    @abstractmethod
    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Ids of a completion prompt (``add_special_tokens`` as in the request)."""

    def completion_ids(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Ids of a completion request's text prompt as the emulated vLLM release builds them
        (``encode`` with the request's flag, unless a release ignores it)."""
        return self.encode(text, add_special_tokens=add_special_tokens)

    @abstractmethod
    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """Text of ``ids``."""

    def chat_ids(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        add_special_tokens: bool = False,
        tools: list[dict[str, Any]] | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
    ) -> list[int]:
        """Ids of a chat request, as vLLM's ``/v1/chat/completions`` produces them.

        Raises ``ChatTemplateError`` for requests vLLM refuses with a 400."""
        check_chat_args(messages, add_generation_prompt, continue_final_message)
        return self._chat_ids(messages, ChatOptions(add_generation_prompt, continue_final_message, add_special_tokens,
                                                    tools, chat_template_kwargs))

    @abstractmethod
    def _chat_ids(self, messages: Sequence[Mapping[str, Any]], opts: ChatOptions) -> list[int]:
        """``chat_ids`` in this mode, for messages that passed ``check_chat_args``."""

    def in_vocab(self, ids: Sequence[int]) -> bool:
        return all(0 <= i < self.vocab_size for i in ids)

    def describe(self) -> str:
        return f"{self.mode}:{self.name} (vocab {self.vocab_size})"


def check_chat_args(messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool,
                    continue_final_message: bool) -> None:
    """vLLM's request validation shared by every mode (``ChatCompletionRequest``
    model validator): both flags at once is a 400."""
    if not messages:
        raise ChatTemplateError("messages must not be empty")
    if continue_final_message and add_generation_prompt:
        raise ChatTemplateError("Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise ChatTemplateError(f"messages[{i}] must be an object")
        role = m.get("role")
        if not isinstance(role, str) or not role:
            raise ChatTemplateError(f"messages[{i}].role must be a non-empty string")
