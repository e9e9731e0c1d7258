"""HF tokenizers (``--tokenizer-mode auto|hf|slow``) via ``transformers``.

Chat requests follow vLLM's HF path: messages are parsed for the template's content
format (``chat_messages``, ``content_format``), the template is resolved (an explicit
``--chat-template`` first, then the tokenizer's own: ``tokenizer_config.json``'s
``chat_template`` or ``chat_template.jinja``), the request's ``chat_template_kwargs``
are filtered to what the template or ``apply_chat_template`` accepts
(``resolve_chat_template_kwargs``), the template is rendered to text and the text is
encoded with the request's ``add_special_tokens`` (default False: the template writes
BOS itself; a request asking for true gets BOS twice, as vLLM gives it). Both releases
do this (checked by vLLM's own renderers in tests/conformance/test_token_ids.py). The other
release differences follow the
``vllm_version`` the tokenizer was loaded for (``rules.py``).

Importing ``transformers`` is paid once at start-up; encoding goes through the Rust
``tokenizers`` backend that transformers wraps (costs: bench/router/tokenize_cost.py).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import jinja2
import jinja2.ext
import jinja2.meta
import jinja2.nodes
import jinja2.sandbox

from pdserve.tokenization.base import ChatOptions, ChatTemplateError, ModelTokenizer, TokenizerLoadError, check_chat_args
from pdserve.tokenization.chat_messages import ContentFormat, developer_to_system, parse_messages
from pdserve.tokenization.content_format import detect_content_format
from pdserve.tokenization.rules import ChatRules, rules_for
from pdserve.tokenization.segments import SegmentEncoder

# vLLM 0.33 refuses these inside chat_template_kwargs ("Found unexpected chat template kwargs").
_UNEXPECTED_KWARGS = {"chat_template", "tokenize"}


class _AssistantTracker(jinja2.ext.Extension):
    # transformers' {% generation %} tag; only parsed here, to find template variables.
    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        call = self.call_method("_generation_support")
        return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)


# The transformers methods between ``tokenizer(text)`` and the Rust backend's encode, in
# 4.x and 5.x; a tokenizer class overriding any of them keeps transformers' own path.
_ENCODE_CHAIN = ("__call__", "_call_one", "encode_plus", "_encode_plus", "_batch_encode_plus",
                 "set_truncation_and_padding", "_get_padding_truncation_strategies", "_switch_to_input_mode")


def _backend_encoder(tok: Any) -> Any | None:
    """The Rust ``tokenizers.Tokenizer`` under a transformers fast tokenizer whose encode path
    is transformers' stock one, or None. ``tokenizer(text)["input_ids"]`` (what vLLM calls) is
    then ``backend.encode_batch_fast([text])[0].ids``: the same pipeline without building
    offsets and a BatchEncoding, about 40 % of the router's per-request tokenizing CPU
    (bench/router/burst.py)."""
    backend = getattr(tok, "_tokenizer", None)
    if backend is None or not hasattr(backend, "encode_batch_fast"):
        return None
    stock = [c for c in type(tok).__mro__ if c.__module__.startswith("transformers.tokenization_utils")
             and c.__name__ in ("TokenizersBackend", "PreTrainedTokenizerFast")]
    if not stock:
        return None
    base = stock[-1]
    for name in _ENCODE_CHAIN:
        if getattr(type(tok), name, None) is not getattr(base, name, None):
            return None
    return backend


# Messages the direct render is checked on against apply_chat_template (per template, once):
# every role, and text with the tokenizer's own special tokens in it (a transformers that
# marks control tokens in user text would render those differently).
def _probe_conversations(special: Sequence[str]) -> list[list[dict[str, str]]]:
    marks = " ".join(special)
    return [[{"role": "user", "content": f"Hello {marks} there.  "}],
            [{"role": "system", "content": " be brief\n"}, {"role": "user", "content": "hi"},
             {"role": "assistant", "content": f"hello {marks}"}, {"role": "user", "content": "\tbye\n\n"}],
            [{"role": "user", "content": "a", "name": "n1"}, {"role": "assistant", "content": ""}]]


def _plain_messages(conversation: Sequence[Mapping[str, Any]]) -> bool:
    """Messages that apply_chat_template passes to the template as they are: only string
    values (no parts lists, no None that transformers 5 drops, no reasoning it aliases),
    under the keys a plain chat message has."""
    for m in conversation:
        for k, v in m.items():
            if type(v) is not str or k not in ("role", "content", "name"):
                return False
    return True


@lru_cache(maxsize=32)
def _template_vars(chat_template: str) -> frozenset[str]:
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_AssistantTracker, jinja2.ext.loopcontrols])
    return frozenset(jinja2.meta.find_undeclared_variables(env.parse(chat_template)))


class HfTokenizer(ModelTokenizer):
    def __init__(self, tokenizer: Any, name: str, mode: str, *, chat_template: str | None = None,
                 content_format: str = "auto", rules: ChatRules | None = None) -> None:
        self._tok = tokenizer
        self.rules = rules or rules_for(None)
        self.name = name
        self.mode = mode
        vocab = tokenizer.get_vocab()  # includes added (special) tokens
        self.vocab_size = max(max(vocab.values()) + 1, len(tokenizer)) if vocab else len(tokenizer)
        self.eos_token_id = tokenizer.eos_token_id
        self._chat_template = chat_template
        if content_format not in ("auto", "string", "openai"):
            raise TokenizerLoadError(f"chat template content format must be auto, string or openai, got {content_format!r}")
        self._content_format = content_format
        self._backend = _backend_encoder(tokenizer)
        # Chat prompts: pieces between special tokens encoded once (conversation history).
        self._segments = SegmentEncoder.plan(self._backend)
        self._fn_params = frozenset(
            p.name for p in inspect.signature(tokenizer.apply_chat_template).parameters.values()
            if p.kind not in (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL))
        # Per template: the kwargs it may receive, and its compiled form when rendering it
        # directly gives apply_chat_template's text (None: always go through transformers).
        self._accept: dict[str, frozenset[str]] = {}
        self._direct: dict[str, Any] = {}
        # The tokenizer's own template without tools (None: not looked up yet) and its special tokens map: both
        # fixed once loaded, and transformers rebuilds them on every call (a dict comprehension, a template lookup).
        self._own_template: str | None = None
        self._special_map: dict[str, Any] = dict(tokenizer.special_tokens_map)

    @property
    def hf(self) -> Any:
        """The underlying ``transformers`` tokenizer (for conformance checks)."""
        return self._tok

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        if not isinstance(text, str):
            raise TypeError(f"encode expects str, got {type(text).__name__}")
        b = self._backend
        if b is not None and self._backend_stock():
            return list(b.encode_batch_fast([text], add_special_tokens=add_special_tokens)[0].ids)
        return list(self._tok(text, add_special_tokens=add_special_tokens)["input_ids"])

    def _backend_stock(self) -> bool:
        """Whether ``tokenizer(text)`` is now the backend's plain encode: transformers' call
        sets these on the backend before encoding (no truncation, no padding, its
        split_special_tokens); when they differ, let it do so."""
        b = self._backend
        return b is not None and b.truncation is None and b.padding is None and \
            b.encode_special_tokens == bool(getattr(self._tok, "split_special_tokens", False))

    def _encode_chat(self, text: str, add_special_tokens: bool) -> list[int]:
        if not add_special_tokens and self._segments is not None and self._backend_stock():
            return self._segments.encode(text)
        return self.encode(text, add_special_tokens=add_special_tokens)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return str(self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens))

    def chat_template(self, tools: list[dict[str, Any]] | None = None) -> str:
        if self._chat_template is not None:
            return self._chat_template
        if tools is None and self._own_template is not None:
            return self._own_template
        try:
            template = str(self._tok.get_chat_template(None, tools=tools))
        except Exception as e:  # transformers raises ValueError when none is defined
            raise ChatTemplateError(
                "As of transformers v4.44, default chat template is no longer allowed, so you must provide "
                f"a chat template if the tokenizer does not define one ({self.name}: {e})") from e
        if tools is None:
            self._own_template = template
        return template

    def content_format(self, template: str) -> ContentFormat:
        if self._content_format == "auto":
            return detect_content_format(template)
        return self._content_format  # type: ignore[return-value]

    def render(self, messages: Sequence[Mapping[str, Any]], opts: ChatOptions | None = None) -> str:
        """The chat prompt as text (what vLLM renders before tokenizing)."""
        opts = opts or ChatOptions()
        check_chat_args(messages, opts.add_generation_prompt, opts.continue_final_message)
        return self._render(messages, opts)

    def _render(self, messages: Sequence[Mapping[str, Any]], opts: ChatOptions) -> str:
        tools = opts.tools
        user_kwargs = dict(opts.chat_template_kwargs or {})
        if bad := _UNEXPECTED_KWARGS & user_kwargs.keys():
            raise ChatTemplateError(f"Found unexpected chat template kwargs from request: {bad}")
        template = self.chat_template(tools)
        conversation = parse_messages(messages, self.content_format(template), self.rules)
        conversation = developer_to_system(conversation, template, self.rules)
        kwargs: dict[str, Any] = {
            **user_kwargs,
            "add_generation_prompt": opts.add_generation_prompt,
            "continue_final_message": opts.continue_final_message,
        }
        accept = self._accept.get(template)
        if accept is None:
            try:
                accept = (self._fn_params | _template_vars(template)) - _UNEXPECTED_KWARGS
            except jinja2.TemplateError as e:
                raise ChatTemplateError(f"chat template does not parse: {e}") from e
            if len(self._accept) < 32:
                self._accept[template] = accept
        kwargs = {k: v for k, v in kwargs.items() if k in accept}
        try:
            direct = None
            if tools is None and not opts.continue_final_message and _plain_messages(conversation):
                direct = self._direct_template(template)
            passed = user_kwargs.keys() & accept
            if direct is not None and not passed & self._fn_params and all(
                    type(user_kwargs[k]) in (str, int, float, bool) for k in passed):
                # What apply_chat_template hands the template for such messages and kwargs
                # (its own parameters are not template variables).
                variables = {**self._special_map,
                             **{k: v for k, v in kwargs.items() if k not in self._fn_params}}
                text = direct.render(messages=conversation, tools=None, documents=None,
                                     add_generation_prompt=opts.add_generation_prompt, **variables)
            else:
                text = self._tok.apply_chat_template(conversation, tools=tools, chat_template=template,
                                                     tokenize=False, **kwargs)
        except Exception as e:  # template errors are the request's fault (vLLM: 400)
            raise ChatTemplateError(f"chat template rejected the request: {e}") from e
        return str(text)

    def _direct_template(self, template: str) -> Any | None:
        """transformers' compiled ``template`` (same environment, filters and globals) when
        rendering it directly gives apply_chat_template's text on the probe conversations,
        else None. apply_chat_template's own work around the render (normalising messages
        into plain data, the kwargs merge) was about half the render's CPU for a plain
        one-message chat, paid on every request (bench/router/burst.py)."""
        if template in self._direct:
            return self._direct[template]
        compiled = None
        try:
            from transformers.utils.chat_template_utils import _compile_jinja_template

            shared = _compile_jinja_template(template)  # transformers' cached copy: not modified here
            # Our own copy in the same environment, with its globals as a plain dict instead of
            # jinja's ChainMap over the environment's (read-only after compilation): every render
            # copies the globals into its context, a C-level dict copy instead of the ChainMap's
            # Python iteration (twice per render). Same values; the probes below compare the text.
            candidate = shared.environment.from_string(template)
            candidate.globals = dict(candidate.globals)
            special = [v for v in self._special_map.values() if isinstance(v, str)]
            compared = 0
            for conversation in _probe_conversations(special):
                for generation_prompt in (True, False):
                    try:
                        want = self._tok.apply_chat_template(conversation, chat_template=template, tokenize=False,
                                                             add_generation_prompt=generation_prompt)
                    except Exception:  # noqa: BLE001 - a template may refuse a shape; others are compared
                        continue
                    got = candidate.render(messages=conversation, tools=None, documents=None,
                                           add_generation_prompt=generation_prompt, **self._special_map)
                    if got != want:
                        raise ValueError("direct render differs")
                    compared += 1
            compiled = candidate if compared else None
        except Exception:  # noqa: BLE001 - no direct render: apply_chat_template as before
            compiled = None
        if len(self._direct) < 32:
            self._direct[template] = compiled
        return compiled

    def _chat_ids(self, messages: Sequence[Mapping[str, Any]], opts: ChatOptions) -> list[int]:
        text = self._render(messages, opts)
        return self._encode_chat(text, opts.add_special_tokens and self.rules.chat_add_special_tokens)


def load_hf(source: str, mode: str, *, revision: str | None, hf_token: str | None, trust_remote_code: bool,
            chat_template: str | None, content_format: str, rules: ChatRules | None = None) -> HfTokenizer:
    try:
        os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
        from transformers import AutoTokenizer
    except ImportError as e:  # pragma: no cover - a dependency of pdserve
        raise TokenizerLoadError(f"--tokenizer-mode {mode} needs the transformers package: {e}") from e
    token = hf_token or os.environ.get("HF_TOKEN") or None
    kwargs: dict[str, Any] = {"revision": revision, "trust_remote_code": trust_remote_code}
    if token:
        kwargs["token"] = token
    if mode == "slow":
        kwargs["use_fast"] = False
    try:
        tok = AutoTokenizer.from_pretrained(source, **kwargs)
    except Exception as e:
        where = "local directory" if os.path.isdir(source) else "hub id (set HF_TOKEN for gated models)"
        raise TokenizerLoadError(f"cannot load tokenizer {source!r} ({where}, mode {mode}): "
                                 f"{type(e).__name__}: {e}") from e
    return HfTokenizer(tok, source, mode, chat_template=chat_template, content_format=content_format, rules=rules)
