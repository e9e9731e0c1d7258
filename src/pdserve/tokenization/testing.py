"""Real tokenizer fixtures without the hub (tests, demos, benchmarks).

``build_bpe_tokenizer(dir)`` trains a small byte-level BPE with the ``tokenizers``
library (the same machinery as Llama 3's ``tokenizer.json``: byte-level
pre-tokenizer and decoder, a BOS-adding post-processor, added special tokens after
the learned vocabulary) on a fixed built-in corpus, and writes a
``tokenizer_config.json`` with Llama 3's chat template (or an "openai"
content-parts variant). Any text encodes (bytes are in the alphabet); ids are >= 0
and < ``vocab_size``. Training is deterministic for a given corpus and size.
``shipped_mistral_tokenizer(name)``: the real Mistral tokenizers inside mistral-common.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pdserve.tokenization.mistral import shipped_tokenizer_path as shipped_mistral_tokenizer  # noqa: F401

BOS = "<|begin_of_text|>"
EOS = "<|end_of_text|>"
EOT = "<|eot_id|>"
SPECIAL_TOKENS = (BOS, EOS, "<|start_header_id|>", "<|end_header_id|>", EOT)


class CountingBackend:
    """A spy for tests of what reaches the Rust backend: forwards to the real backend and
    records the texts it was asked to encode."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.texts: list[str] = []

    def encode_batch_fast(self, texts: list[str], add_special_tokens: bool) -> Any:
        self.texts += texts
        return self.backend.encode_batch_fast(texts, add_special_tokens=add_special_tokens)


# Meta-Llama-3-8B-Instruct's chat template (string content).
LLAMA3_CHAT_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
# The same layout iterating over OpenAI content parts (vLLM detects "openai" format).
LLAMA3_PARTS_CHAT_TEMPLATE = (
    "{{- bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}"
    "{% if message['content'] is string %}{{ message['content'] | trim }}"
    "{% else %}{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}"
    "{% endif %}{% endfor %}{% endif %}{{ '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

_WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at which but have an "
    "they you were her she there been one all we their has would when if so no will more can its some time "
    "than only into other these two may then first any like very could new now way also made after over did "
    "many before must through back years where much your well down should because each just those people how "
    "too little state good make world still own see men work long get here between both life being under "
    "never day same another know while last might us great old year off come since against go came right "
    "used take three model token cache prefill decode request server latency memory block router batch "
    "stream queue engine worker value system data result light water river city small large open green "
    "quiet simple clear early late bright house road story music paper field signal question answer please "
    "explain summarize write code function python kubernetes cluster deploy service network gpu tensor "
    "parallel pipeline attention transformer layer weight training inference prompt context window"
).split()


def _corpus(n_lines: int = 4000) -> list[str]:
    # A fixed pseudo-random walk over the word list: deterministic, no RNG state.
    lines = []
    x = 12345
    for i in range(n_lines):
        words = []
        for _ in range(8 + i % 9):
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF
            words.append(_WORDS[x % len(_WORDS)])
        sentence = " ".join(words).capitalize()
        lines.append(f"{sentence}{'.,?!:;'[i % 6]} {i % 97} {words[0].upper()} ({words[-1]})\n")
    return lines


def build_bpe_tokenizer(
    directory: str | Path,
    *,
    vocab_size: int = 2000,
    content_format: Literal["string", "openai"] = "string",
    template_file: bool = False,
) -> Path:
    """Write ``tokenizer.json`` + ``tokenizer_config.json`` (and, with
    ``template_file``, the template as ``chat_template.jinja`` instead of in the
    config) to ``directory``; returns it."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(_corpus(), trainer)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIAL_TOKENS])
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)])
    tok.save(str(out / "tokenizer.json"))
    template = LLAMA3_CHAT_TEMPLATE if content_format == "string" else LLAMA3_PARTS_CHAT_TEMPLATE
    config: dict[str, object] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOT,
        "model_max_length": 131072,
    }
    if template_file:
        (out / "chat_template.jinja").write_text(template)
    else:
        config["chat_template"] = template
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=1))
    return out
