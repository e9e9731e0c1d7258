"""The router's tokenizer at start-up: the served model's (``--tokenizer``,
``--tokenizer-mode``), or, only with ``--tokenizer-fallback approx``, a degraded mode.

Without a loadable tokenizer the router refuses to start (the message names the
source and the reason). With the opt-in fallback it starts with a warning, sets
``pdserve_router_tokenizer_fallback 1``, routes prefixes by its own routing history
(``prefix_approx`` in place of ``kv_aware``: KV events cannot be matched without the
model's ids), hashes prompts with the mock tokenizer's text pieces, and ends a lost
stream with an error instead of migrating it (it has no model ids to resume with).
"""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, Gauge

from pdserve.router.shell.config import RouterConfig
from pdserve.tokenization import ModelTokenizer, TokenizerLoadError, load_tokenizer
from pdserve.tokenization.mock import MockTokenizer

log = logging.getLogger("pdserve.router")


def load_router_tokenizer(cfg: RouterConfig, registry: CollectorRegistry) -> ModelTokenizer:
    """Load the tokenizer; may switch ``cfg`` to the fallback (policies, migration)."""
    gauge = Gauge("pdserve_router_tokenizer_fallback",
                  "1 when the router runs without the model's tokenizer (approximate prefix routing)",
                  registry=registry, multiprocess_mode="max")
    try:
        tok = load_tokenizer(cfg.tokenizer or "", cfg.tokenizer_mode, revision=cfg.tokenizer_revision,
                             trust_remote_code=cfg.trust_remote_code, chat_template=cfg.chat_template,
                             chat_template_content_format=cfg.chat_template_content_format,
                             vllm_version=cfg.vllm_version)
    except TokenizerLoadError as e:
        if cfg.tokenizer_fallback != "approx":
            raise ValueError(f"{e} (start anyway with --tokenizer-fallback approx: approximate prefix "
                             "routing by the router's history, no stream migration)") from e
        log.warning("tokenizer unavailable, falling back to approximate prefix routing "
                    "(policy %s -> prefix_approx, no stream migration): %s", cfg.routing.policy.value, e)
        gauge.set(1)
        cfg.routing = cfg.routing.without_kv_events()
        cfg.migrate = False
        return MockTokenizer()
    gauge.set(0)
    log.info("tokenizer %s", tok.describe())
    return tok
