"""Local stand-ins for a hub model: a real BPE tokenizer and a tiny Llama config.json.

vLLM's ``create_engine_config`` reads the model's config.json and tokenizer; pointing it at
this directory (instead of the rendered hub id) lets vLLM's own config code validate a
rendered command line on a machine without the hub or a GPU.
"""

from __future__ import annotations

import json
from pathlib import Path

import shutil

from pdserve.tokenization.testing import build_bpe_tokenizer, shipped_mistral_tokenizer

TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "num_hidden_layers": 2,
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
}


def build_model_dir(directory: Path) -> Path:
    tok = build_bpe_tokenizer(directory)
    vocab = json.loads((tok / "tokenizer.json").read_text())
    size = len(vocab["model"]["vocab"]) + len(vocab["added_tokens"])
    config = {**TINY_LLAMA, "vocab_size": size, "bos_token_id": 0, "eos_token_id": 1}
    (directory / "config.json").write_text(json.dumps(config, indent=1))
    return directory


def build_mistral_model_dir(directory: Path) -> Path:
    """mistral-common's shipped Tekken tokenizer as ``tekken.json`` and a tiny Mistral config.json."""
    shutil.copy(shipped_mistral_tokenizer("tekken"), directory / "tekken.json")
    config = {**TINY_LLAMA, "architectures": ["MistralForCausalLM"], "model_type": "mistral", "vocab_size": 131072,
              "bos_token_id": 1, "eos_token_id": 2}
    (directory / "config.json").write_text(json.dumps(config, indent=1))
    return directory
