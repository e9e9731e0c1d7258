"""Plain chats are rendered with transformers' compiled template directly, not through
apply_chat_template (pdserve.tokenization.hf, ``_direct_template``): the text must be
apply_chat_template's for every plain conversation, and anything else (tools, content
parts, kwargs that are apply_chat_template's own parameters, a tokenizer whose
apply_chat_template renders differently) must still go through transformers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdserve.tokenization import ChatOptions, load_tokenizer
from pdserve.tokenization.hf import HfTokenizer
from pdserve.tokenization.testing import LLAMA3_CHAT_TEMPLATE, SPECIAL_TOKENS, build_bpe_tokenizer

# Reads a request kwarg, the special tokens transformers passes, names and the generation prompt.
VARS_TEMPLATE = ("{{ bos_token }}{% if greeting is defined %}[{{ greeting }}|{{ n | default(0) }}]{% endif %}"
                 "{% for m in messages %}<{{ m['role'] }}{% if m.name is defined %}:{{ m.name }}{% endif %}>"
                 "{{ m['content'] | trim }}{{ eos_token }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}")


@pytest.fixture(scope="module")
def bpe_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_bpe_tokenizer(tmp_path_factory.mktemp("bpe"))


def hf_tokenizer(bpe_dir: Path, template: str | None = None) -> HfTokenizer:
    t = load_tokenizer(str(bpe_dir), chat_template=template)
    assert isinstance(t, HfTokenizer)
    return t


@pytest.fixture(scope="module")
def toks(bpe_dir: Path) -> dict[str, HfTokenizer]:
    return {"llama3": hf_tokenizer(bpe_dir), "vars": hf_tokenizer(bpe_dir, VARS_TEMPLATE)}


text = st.text(max_size=30) | st.sampled_from([*SPECIAL_TOKENS, " ", "\n", "  padded  "])
message = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system"]),
                                 "content": st.lists(text, max_size=4).map("".join)},
                                optional={"name": st.sampled_from(["a", "bob"])})
scalar = st.one_of(st.text(max_size=10), st.integers(-5, 5), st.booleans(), st.floats(allow_nan=False))


@settings(max_examples=300, deadline=None)
@given(form=st.sampled_from(["llama3", "vars"]), messages=st.lists(message, min_size=1, max_size=4),
       generation_prompt=st.booleans(),
       kwargs=st.dictionaries(st.sampled_from(["greeting", "n", "unused"]), scalar, max_size=3))
def test_direct_render_is_apply_chat_template(toks: dict[str, HfTokenizer], form: str,
                                              messages: list[dict[str, str]], generation_prompt: bool,
                                              kwargs: dict[str, Any]) -> None:
    tok = toks[form]
    opts = ChatOptions(add_generation_prompt=generation_prompt, chat_template_kwargs=kwargs)
    got = tok.render(messages, opts)
    template = tok.chat_template()
    assert tok._direct[template] is not None  # the direct render was used
    # vLLM's call (kwargs the template does not read change nothing there)
    want = tok.hf.apply_chat_template(messages, chat_template=template, tokenize=False,
                                      add_generation_prompt=generation_prompt, **kwargs)
    assert got == want


class Spy:
    """Counts calls to a tokenizer's apply_chat_template (optionally changing its text)."""

    def __init__(self, tok: HfTokenizer, suffix: str = "") -> None:
        self.calls = 0
        real = tok.hf.apply_chat_template

        def spy(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return real(*args, **kwargs) + suffix

        tok.hf.apply_chat_template = spy  # on this instance only


def test_plain_chats_skip_apply_chat_template_others_do_not(bpe_dir: Path) -> None:
    tok = hf_tokenizer(bpe_dir, VARS_TEMPLATE)
    spy = Spy(tok)
    plain = [{"role": "user", "content": "hello"}]
    tok.render(plain)
    probed = spy.calls  # the one-time check of the direct render against apply_chat_template
    assert probed > 0
    tok.render(plain)
    tok.render([{"role": "user", "content": "again"}], ChatOptions(chat_template_kwargs={"greeting": "x"}))
    assert spy.calls == probed
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    # Parts and null content are joined into strings first (the string content format): plain.
    tok.render([{"role": "user", "content": [{"type": "text", "text": "parts"}]},
                {"role": "assistant", "content": None}], ChatOptions(add_generation_prompt=False))
    assert spy.calls == probed
    tok.render(plain, ChatOptions(tools=tools))
    tok.render(plain, ChatOptions(chat_template_kwargs={"documents": [{"title": "t", "text": "d"}]}))
    tok.render(plain, ChatOptions(chat_template_kwargs={"greeting": ["a list"]}))
    tok.render([{"role": "user", "content": "go on"}],
               ChatOptions(add_generation_prompt=False, continue_final_message=True))
    assert spy.calls == probed + 4


def test_a_tokenizer_that_renders_differently_keeps_apply_chat_template(bpe_dir: Path) -> None:
    tok = hf_tokenizer(bpe_dir)
    Spy(tok, suffix="<changed>")  # e.g. a transformers release that edits the messages first
    text = tok.render([{"role": "user", "content": "hello"}])
    assert tok._direct[LLAMA3_CHAT_TEMPLATE] is None
    assert text.endswith("<changed>")


# Reads jinja's and transformers' globals (namespace, range, raise_exception) in the render.
GLOBALS_TEMPLATE = ("{% set ns = namespace(n=0) %}{% for m in messages %}{% if m['role'] == 'tool' %}"
                    "{{ raise_exception('no tools here') }}{% endif %}{% set ns.n = ns.n + 1 %}"
                    "{{ ns.n }}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}{% for i in range(2) %}.{% endfor %}"
                    "{% if add_generation_prompt %}<assistant>{% endif %}")


def test_direct_render_reads_globals_from_a_plain_copy(bpe_dir: Path) -> None:
    """Each render copies the template's globals into its context: from a plain dict (one
    C-level copy), not jinja's ChainMap over the environment's globals (iterated in Python,
    twice per render). The copy is the direct render's own: transformers' cached template,
    which apply_chat_template keeps using, is left as it was."""
    from transformers.utils.chat_template_utils import _compile_jinja_template

    tok = hf_tokenizer(bpe_dir, GLOBALS_TEMPLATE)
    messages = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    got = tok.render(messages)
    direct = tok._direct[GLOBALS_TEMPLATE]
    assert direct is not None and type(direct.globals) is dict
    shared = _compile_jinja_template(GLOBALS_TEMPLATE)
    assert direct is not shared and type(shared.globals) is not dict
    assert direct.globals == dict(shared.globals)
    assert got == tok.hf.apply_chat_template(messages, chat_template=GLOBALS_TEMPLATE, tokenize=False,
                                             add_generation_prompt=True) == "1<user>a2<assistant>b..<assistant>"
    with pytest.raises(Exception, match="no tools here"):
        tok.render([{"role": "tool", "content": "x"}])


def test_the_tokenizers_own_template_and_special_tokens_are_read_once(bpe_dir: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # transformers rebuilds both on every call (get_chat_template's lookup, special_tokens_map's dict comprehension);
    # both are fixed once the tokenizer is loaded, so a chat request reads neither. The text is unchanged.
    t = hf_tokenizer(bpe_dir)
    calls = {"template": 0, "special": 0}
    cls = type(t.hf)
    get, special = cls.get_chat_template, cls.special_tokens_map

    def counting_get(self: Any, chat_template: str | None = None, tools: Any = None) -> str:
        calls["template"] += chat_template is None
        return get(self, chat_template, tools)

    def counting_special(self: Any) -> dict[str, str]:
        calls["special"] += 1
        return special.fget(self)

    monkeypatch.setattr(cls, "get_chat_template", counting_get)
    monkeypatch.setattr(cls, "special_tokens_map", property(counting_special))
    chat = [{"role": "user", "content": "hello there"}]
    first = t.render(chat)  # the template looked up once, the direct render probed once
    calls["template"] = calls["special"] = 0
    for _ in range(3):
        assert t.render(chat) == first
    assert calls == {"template": 0, "special": 0}
    assert first == t.hf.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
