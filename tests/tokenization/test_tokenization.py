"""pdserve.tokenization against real tokenizers: a byte-level BPE built here with
the ``tokenizers`` library (Llama 3 layout and chat template) and the Mistral
tokenizers shipped in mistral-common. vLLM's own preprocessing is the judge in the
conformance tier; these tests pin the behaviour vLLM documents."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pdserve.tokenization import ChatOptions, ChatTemplateError, TokenizerLoadError, load_tokenizer
from pdserve.tokenization.testing import EOT, LLAMA3_CHAT_TEMPLATE, build_bpe_tokenizer, shipped_mistral_tokenizer

HEADER = "<|start_header_id|>{}<|end_header_id|>\n\n"


@pytest.fixture(scope="module")
def bpe_dir(tmp_path_factory):
    return build_bpe_tokenizer(tmp_path_factory.mktemp("bpe"))


@pytest.fixture(scope="module")
def tok(bpe_dir):
    return load_tokenizer(str(bpe_dir))


def _llama3(*turns: tuple[str, str], gen: bool = True) -> str:
    text = "<|begin_of_text|>" + "".join(HEADER.format(r) + c.strip() + EOT for r, c in turns)
    return text + (HEADER.format("assistant") if gen else "")


def test_bpe_fixture_is_a_real_vocabulary(tok, bpe_dir):
    assert tok.mode == "auto" and tok.name == str(bpe_dir)
    assert 1000 < tok.vocab_size < 4000  # a small real vocabulary, not a hashed id space
    text = "Explain the router's KV cache: ünïcödé, 数字 and emoji 🚀 work too."
    ids = tok.encode(text, add_special_tokens=False)
    assert all(0 <= i < tok.vocab_size for i in ids)
    assert tok.decode(ids) == text
    assert tok.eos_token_id == tok.encode(EOT, add_special_tokens=False)[0]


def test_completion_adds_bos_only_with_special_tokens(tok):
    plain = tok.encode("Hello world", add_special_tokens=False)
    with_bos = tok.encode("Hello world")
    bos = tok.encode("<|begin_of_text|>", add_special_tokens=False)
    assert len(bos) == 1 and with_bos == bos + plain


def test_chat_ids_are_the_llama3_template_encoded_without_special_tokens(tok):
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "  What is a KV cache? "}]
    expected = _llama3(("system", "Be brief."), ("user", "What is a KV cache?"))
    assert tok.render(msgs) == expected
    ids = tok.chat_ids(msgs)
    assert ids == tok.encode(expected, add_special_tokens=False)
    assert ids.count(tok.encode("<|begin_of_text|>", add_special_tokens=False)[0]) == 1
    # Both releases encode the rendered text with the request's add_special_tokens: a second
    # BOS when it is true (vLLM's own renderers say so: tests/conformance/test_token_ids.py).
    assert tok.chat_ids(msgs, add_special_tokens=True) == tok.encode(expected, add_special_tokens=True)
    tok011 = load_tokenizer(str(tok.name), vllm_version="0.11.0")
    assert tok011.chat_ids(msgs, add_special_tokens=True) == tok.encode(expected, add_special_tokens=True)
    assert tok011.chat_ids(msgs) == ids
    no_gen = tok.chat_ids(msgs, add_generation_prompt=False)
    assert ids[: len(no_gen)] == no_gen and len(ids) > len(no_gen)


def test_content_parts_string_format_joins_with_newline(tok):
    msgs = [{"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "input_text", "text": "there"},
                                         {"type": "text", "text": None}]}]
    assert tok.render(msgs) == _llama3(("user", "Hi\nthere"))


def test_content_parts_openai_format_reach_the_template_as_parts(tmp_path):
    t = load_tokenizer(str(build_bpe_tokenizer(tmp_path, content_format="openai", template_file=True)))
    msgs = [{"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "there"}]}]
    assert t.render(msgs).endswith(HEADER.format("user") + "Hithere" + EOT + HEADER.format("assistant"))
    # string content is wrapped as one part and rendered the same way
    assert t.render([{"role": "user", "content": "Hithere"}]) == t.render(msgs)
    # the format can be forced as with vLLM's --chat-template-content-format
    forced = load_tokenizer(str(tmp_path), chat_template_content_format="string")
    assert "Hi\nthere" in forced.render(msgs)


def test_continue_final_message_leaves_the_assistant_turn_open(tok):
    msgs = [{"role": "user", "content": "Count"}, {"role": "assistant", "content": "one two"}]
    text = tok.render(msgs, ChatOptions(add_generation_prompt=False, continue_final_message=True))
    assert text.endswith(HEADER.format("assistant") + "one two")
    with pytest.raises(ChatTemplateError, match="Cannot set both"):
        tok.chat_ids(msgs, continue_final_message=True)  # add_generation_prompt defaults to True, as in vLLM


def test_chat_template_kwargs_filtered_and_reserved_ones_refused(tok):
    msgs = [{"role": "user", "content": "x"}]
    assert tok.chat_ids(msgs, chat_template_kwargs={"enable_thinking": False}) == tok.chat_ids(msgs)
    with pytest.raises(ChatTemplateError, match="unexpected chat template kwargs"):
        tok.chat_ids(msgs, chat_template_kwargs={"tokenize": True})


def test_bad_messages_are_client_errors(tok):
    with pytest.raises(ChatTemplateError, match="image_url"):
        tok.chat_ids([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x"}}]}])
    with pytest.raises(ChatTemplateError, match="role"):
        tok.chat_ids([{"content": "no role"}])
    with pytest.raises(ChatTemplateError):
        tok.chat_ids([])


def test_developer_role_becomes_system_when_the_template_has_none(tok):
    msgs = [{"role": "developer", "content": "Rules."}, {"role": "user", "content": "q"}]
    assert tok.render(msgs) == _llama3(("system", "Rules."), ("user", "q"))
    # 0.11 hands the template the developer role as is
    assert load_tokenizer(str(tok.name), vllm_version="0.11.0").render(msgs) == _llama3(("developer", "Rules."),
                                                                                           ("user", "q"))


def test_unknown_vllm_version_is_a_load_error(bpe_dir):
    with pytest.raises(TokenizerLoadError, match="vLLM version"):
        load_tokenizer(str(bpe_dir), vllm_version="latest")


def test_assistant_tool_call_arguments_reach_the_template_as_dicts(tmp_path):
    tmpl = ("{% for m in messages %}{% for c in m.tool_calls or [] %}{{ c.function.name }}"
            "{{ c.function.arguments['city'] }}{% endfor %}{% endfor %}")
    t = load_tokenizer(str(build_bpe_tokenizer(tmp_path)), chat_template=tmpl)
    msgs = [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}]}]
    assert t.render(msgs, ChatOptions(add_generation_prompt=False)) == "weatherParis"


def test_explicit_chat_template_file_overrides(tmp_path, bpe_dir):
    f = tmp_path / "t.jinja"
    f.write_text("{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}{% endfor %}")
    t = load_tokenizer(str(bpe_dir), chat_template=str(f))
    assert t.render([{"role": "user", "content": "hi"}]) == "[user]hi"
    assert load_tokenizer(str(bpe_dir), chat_template=LLAMA3_CHAT_TEMPLATE).render(
        [{"role": "user", "content": "hi"}]) == _llama3(("user", "hi"))


@pytest.mark.parametrize("name", ["v1", "v3", "v7", "tekken"])
def test_mistral_shipped_tokenizers(name):
    t = load_tokenizer(str(shipped_mistral_tokenizer(name)), "mistral")
    assert t.mode == "mistral" and t.vocab_size in (32000, 32768, 131072)
    assert t.encode("Hello world")[0] == 1 and t.encode("Hello world", add_special_tokens=False)[0] != 1
    ids = t.chat_ids([{"role": "user", "content": "Hello world"}])
    assert ids[0] == 1 and all(0 <= i < t.vocab_size for i in ids)
    body = t.encode("Hello world", add_special_tokens=False)
    assert any(ids[i : i + len(body)] == body for i in range(len(ids)))
    with pytest.raises(ChatTemplateError, match="continue_final_message"):
        t.chat_ids([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])
    cont = t.chat_ids([{"role": "user", "content": "a"}, {"role": "assistant", "content": "Sure thing"}],
                      add_generation_prompt=False, continue_final_message=True)
    assert cont[-1] != t.eos_token_id and t.decode(cont).endswith("Sure thing")
    with pytest.raises(ChatTemplateError, match="not supported for Mistral"):
        t.chat_ids([{"role": "user", "content": "a"}], chat_template_kwargs={})


def test_auto_mode_picks_mistral_for_a_mistral_only_source():
    assert load_tokenizer(str(shipped_mistral_tokenizer("v3"))).mode == "mistral"


def test_mock_mode_only_when_named(tok):
    mock = load_tokenizer("", "mock")
    assert mock.mode == "mock"
    with pytest.raises(TokenizerLoadError, match="--tokenizer"):
        load_tokenizer("", "auto")
    with pytest.raises(TokenizerLoadError, match="unknown tokenizer mode"):
        load_tokenizer("x", "fast")


def test_missing_local_tokenizer_fails_clearly(tmp_path):
    with pytest.raises(TokenizerLoadError, match="cannot load tokenizer"):
        load_tokenizer(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(TokenizerLoadError, match="local directory"):
        load_tokenizer(str(tmp_path / "empty"))


def test_unreachable_hub_id_fails_clearly_without_network():
    # HF_HUB_OFFLINE is read at import time: a fresh interpreter keeps the test off the network.
    code = ("from pdserve.tokenization import load_tokenizer, TokenizerLoadError\n"
            "try:\n    load_tokenizer('meta-llama/Llama-3.1-8B-Instruct')\n"
            "except TokenizerLoadError as e:\n    print('ERR', e)\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": "/nonexistent-pdserve-hf-home"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert "ERR cannot load tokenizer 'meta-llama/Llama-3.1-8B-Instruct' (hub id" in out.stdout, out.stderr[-2000:]
