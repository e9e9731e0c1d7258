"""The served model's tokenizer, loaded as vLLM loads it (``--tokenizer``,
``--tokenizer-mode``), so the router's token ids are the model's.

    tok = load_tokenizer("/models/llama", "auto")
    tok.encode("Hello")                         # a completion prompt's ids
    tok.chat_ids([{"role": "user", "content": "Hi"}])   # a chat request's ids

See docs/internals.md ("Tokenization").
"""

from pdserve.tokenization.base import (
    TOKENIZER_MODES,
    ChatOptions,
    ChatTemplateError,
    ModelTokenizer,
    TokenizerLoadError,
    TokenizerMode,
)
from pdserve.tokenization.loader import load_tokenizer

__all__ = [
    "TOKENIZER_MODES",
    "ChatOptions",
    "ChatTemplateError",
    "ModelTokenizer",
    "TokenizerLoadError",
    "TokenizerMode",
    "load_tokenizer",
]
