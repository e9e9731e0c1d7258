"""``load_tokenizer``: vLLM's ``--tokenizer`` / ``--tokenizer-mode`` for pdserve.

Modes mirror vLLM's: ``auto`` (HF fast tokenizer; a source that holds only a
mistral-common tokenizer file is loaded in ``mistral`` mode), ``hf`` (HF, fast),
``slow`` (HF ``use_fast=False``), ``mistral`` (mistral-common), plus pdserve's
``mock`` (the hash-word tokenizer, only when asked for by name).
"""

from __future__ import annotations

from pathlib import Path

from pdserve.tokenization.base import TOKENIZER_MODES, ModelTokenizer, TokenizerLoadError


def _mistral_only(source: str) -> bool:
    p = Path(source)
    if p.is_file():
        return p.name.startswith("tekken") or ".model.v" in p.name
    if p.is_dir():
        hf_files = (p / "tokenizer.json").exists() or (p / "tokenizer_config.json").exists()
        return not hf_files and (any(p.glob("tekken*.json")) or any(p.glob("tokenizer.model.v*")))
    return False


def load_tokenizer(
    source: str,
    mode: str = "auto",
    *,
    revision: str | None = None,
    hf_token: str | None = None,
    trust_remote_code: bool = False,
    chat_template: str | None = None,
    chat_template_content_format: str = "auto",
    vllm_version: str | None = None,
) -> ModelTokenizer:
    """Load the served model's tokenizer.

    ``source``: a local directory (``tokenizer.json`` / ``tokenizer_config.json`` /
    ``chat_template.jinja``), a tokenizer file (mistral), or a hub id (token from
    ``hf_token`` or env ``HF_TOKEN``). ``chat_template``: vLLM's ``--chat-template``
    (template text or a file path). ``vllm_version``: the release whose chat preprocessing
    to reproduce where releases differ (``rules.py``; default: pdserve's default version).
    Raises ``TokenizerLoadError`` with the reason.
    """
    from pdserve.tokenization.rules import rules_for

    try:
        rules = rules_for(vllm_version)
    except ValueError as e:
        raise TokenizerLoadError(str(e)) from e
    if mode not in TOKENIZER_MODES:
        raise TokenizerLoadError(f"unknown tokenizer mode {mode!r}; choose one of {', '.join(TOKENIZER_MODES)}")
    if mode == "mock":
        from pdserve.tokenization.mock import MockTokenizer

        return MockTokenizer()
    if not source:
        raise TokenizerLoadError("no tokenizer given: pass --tokenizer (the model's hub id or a local directory)")
    if mode == "mistral" or (mode == "auto" and _mistral_only(source)):
        from pdserve.tokenization.mistral import load_mistral

        return load_mistral(source, revision=revision, hf_token=hf_token, rules=rules)
    from pdserve.tokenization.hf import load_hf

    template = None
    if chat_template is not None:
        # vLLM's load_chat_template: text with any of "{}\n" is the template itself, else a path.
        try:
            template = chat_template if any(c in chat_template for c in "{}\n") else Path(chat_template).read_text()
        except OSError as e:
            raise TokenizerLoadError(f"cannot read chat template {chat_template!r}: {e}") from e
    return load_hf(source, mode, revision=revision, hf_token=hf_token, trust_remote_code=trust_remote_code,
                   chat_template=template, content_format=chat_template_content_format, rules=rules)
