"""Chat templates: conversations rendered by the checkpoint's own template, tokenized, and stopped at the end of
the turn; text and ids against transformers' apply_chat_template (tests/data/chat_goldens.json, written by
tools/make_chat_goldens.py)."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime
from pathlib import Path

import pytest
from conftest import ROOT
from said import said
from test_real_models import cached
from tokenizers import Tokenizer
from typer.testing import CliRunner

from engine import Session, make_backend
from engine.loading.chat import ChatTemplate, Message, find_template, render, tokenize_chat
from engine.loading.checkpoint import load_checkpoint
from engine.loading.document import ScenarioError
from engine.loading.gguf_model import GGUFModel
from engine.loading.scenario_file import load_scenario
from engine.loading.tokenizer import gguf_tokenizer
from engine.spec import DecodeRule
from tinyllm_tui import cli
from tinyllm_tui.tui.i18n import cause_words

FIXTURES = ROOT / "tests" / "fixtures"
GOLDENS = json.loads((ROOT / "tests" / "data" / "chat_goldens.json").read_text(encoding="utf-8"))["goldens"]
SMOLLM2 = "SmolLM2-135M-Instruct.Q4_1.gguf"
QUESTION = "What is the capital of France?"


def checkpoint(name: str) -> Path:
    return cached(SMOLLM2) if name == "smollm2" else ROOT / name


def tokenizer_of(path: Path) -> Tokenizer:
    if path.suffix == ".gguf":
        model = GGUFModel(path)
        return gguf_tokenizer(model.meta, model.error)
    return Tokenizer.from_file(str(path / "tokenizer.json"))


@pytest.mark.parametrize("golden", GOLDENS, ids=lambda g: f"{Path(g['checkpoint']).name}-{len(g['messages'])}")
def test_text_and_ids_equal_transformers_apply_chat_template(golden):
    path = checkpoint(golden["checkpoint"])
    messages = [Message(m["role"], m["content"]) for m in golden["messages"]]
    chat = tokenize_chat(find_template(path), tokenizer_of(path), messages, **golden["variables"])
    assert chat.text == golden["text"]
    assert list(chat.ids) == golden["ids"]


def test_smollm2_answers_the_chat_naming_paris_and_stops_at_the_end_of_turn():
    path = cached(SMOLLM2)
    scenario = load_checkpoint(path, chat=[[("user", QUESTION)]], max_new_tokens=24)
    golden = next(g for g in GOLDENS if g["checkpoint"] == "smollm2" and len(g["messages"]) == 1)
    assert list(scenario.requests[0].tokens) == golden["ids"]
    session = Session(scenario, make_backend("numpy"))
    for _ in session.steps():
        pass
    result = session.results[0]
    im_end = 2  # <|im_end|> in SmolLM2's vocabulary
    assert scenario.vocab.tokens[im_end] == "<|im_end|>"
    assert result.stop == "end_of_turn" and result.generated[-1] == im_end
    assert "Paris" in "".join(scenario.vocab.tokens[t] for t in result.generated)


def test_each_token_knows_its_message_and_whether_it_is_the_templates_markup():
    path = FIXTURES / "chat-qwen2"
    tokenizer = tokenizer_of(path)
    messages = [Message("system", "Be brief."), Message("user", "The cat sat?")]
    chat = tokenize_chat(find_template(path), tokenizer, messages)
    pieces = [tokenizer.id_to_token(t) for t in chat.ids]
    assert [p for p, control in zip(pieces, chat.control) if control] == ["<|im_start|>", "<|im_end|>"] * 2 + [
        "<|im_start|>"]
    for index, message in enumerate(messages):
        mine = [t for t, source in zip(chat.ids, chat.sources) if source == index]
        assert tokenizer.decode(mine) == message.content
    assert all(not control for control, source in zip(chat.control, chat.sources) if source is not None)


@pytest.mark.parametrize(("name", "token"), [("chat-qwen2", "<|im_end|>"), ("chat-llama3", "<|eot_id|>")])
def test_the_end_of_turn_is_the_special_token_the_template_writes_after_a_reply(name, token):
    path = FIXTURES / name
    tokenizer = tokenizer_of(path)
    chat = tokenize_chat(find_template(path), tokenizer, [Message("user", "Hi")])
    assert chat.end_of_turn == tokenizer.token_to_id(token)


def test_generation_stops_at_the_end_of_turn_token_even_where_it_is_not_eos():
    path = FIXTURES / "chat-llama3"  # eos is </s> (1), a turn ends with <|eot_id|>
    eot = tokenizer_of(path).token_to_id("<|eot_id|>")
    only_eot = DecodeRule(forbid=tuple(t for t in range(303) if t != eot), max_new_tokens=4)
    chat = load_checkpoint(path, chat=[[("user", "Hi")]], max_new_tokens=4)
    prompt = load_checkpoint(path, prompt="Hi", max_new_tokens=4)
    assert chat.vocab.eos != eot
    results = []
    for scenario in (chat, prompt):
        session = Session(dataclasses.replace(scenario, decode=only_eot), make_backend("numpy"))
        for _ in session.steps():
            pass
        results.append(session.results[0])
    assert (results[0].generated, results[0].stop) == ((eot,), "end_of_turn")
    assert (results[1].generated, results[1].stop) == ((eot,) * 4, "max_new_tokens")  # a prompt has no turn to end


def test_strftime_now_gives_todays_date_where_the_template_asks_for_it():
    path = FIXTURES / "chat-llama3"
    text = render(find_template(path), [Message("user", "Hi")])
    assert f"Today Date: {datetime.now().strftime('%d %b %Y')}\n\n" in text


def test_tojson_writes_json_without_html_escapes_and_keeps_non_ascii():
    template = ChatTemplate("t.jinja", "", "{{ messages[0] | tojson }}|{{ messages[0].content | tojson(indent=1) }}",
                            ())
    text = render(template, [Message("user", "<b>café</b> & 我")])
    assert text == json.dumps({"role": "user", "content": "<b>café</b> & 我"}, ensure_ascii=False) + "|" + \
        json.dumps("<b>café</b> & 我", ensure_ascii=False, indent=1)


def test_dict_and_namespace_work_as_templates_use_them():
    text = ("{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}"
            "{{ ns.n }} {{ dict(a=1) | tojson }} {{ dict.fromkeys(['x'], 2) | tojson }}")
    template = ChatTemplate("t.jinja", "", text, ())
    assert render(template, [Message("user", "a"), Message("user", "b")]) == '2 {"a": 1} {"x": 2}'


def test_whitespace_control_is_transformers_trim_and_lstrip_blocks():
    template = ChatTemplate("t.jinja", "", "    {% for m in messages %}\n[{{ m.content }}]\n    {% endfor %}\n", ())
    assert render(template, [Message("user", "a"), Message("user", "b")]) == "[a]\n[b]\n"


@pytest.mark.parametrize(("text", "words"), [
    ("{{ messages.__class__.__mro__ }}", "refused the conversation"),  # the sandbox: no dunder attributes
    ("{{ messages.append(1) }}", "refused the conversation"),  # immutable: a template cannot change the messages
    ("{% set ns = namespace(_x=1) %}", "refused the conversation at line 1: a namespace cannot hold"),
    ("{% set ns = namespace(a=1) %}{% set ns.__class__ = 1 %}", "refused the conversation"),
    ("{{ dict.__class__.__mro__ }}", "refused the conversation"),
    ("{% for m in messages %}{{ m.content }}", "does not parse: line 1:"),
    ("hello\n{{ raise_exception('Only user and assistant roles are supported!') }}",
     "refused the conversation at line 2: Only user and assistant roles are supported!"),
    ("{{ messages[0].content + 1 }}", "failed at line 1: TypeError:"),
])
def test_a_template_that_fails_is_refused_in_one_line_naming_it(text, words):
    template = ChatTemplate("model/tokenizer_config.json", "chat_template", text, ())
    with pytest.raises(ScenarioError) as raised:
        render(template, [Message("user", "Hi")])
    message = said(raised.value)
    assert message.startswith("model/tokenizer_config.json: chat_template: the chat template ")
    assert words in message and "\n" not in message


def test_chat_template_jinja_wins_over_tokenizer_config():
    template = find_template(FIXTURES / "chat-llama3")
    assert template.file.endswith("chat-llama3/chat_template.jinja")
    assert "<|start_header_id|>" in template.text
    assert dict(template.specials) == {"bos_token": "<s>", "eos_token": "</s>"}  # an AddedToken's content


def invoke(*args):
    return CliRunner().invoke(cli.app, [str(a) for a in args])


@pytest.mark.parametrize(("args", "message"), [
    ((FIXTURES / "qwen2", "--chat", "Hi"),
     f"{FIXTURES / 'qwen2'}: chat_template: missing: --chat needs the checkpoint's chat template"),
    ((FIXTURES / "tiny-gguf" / "tiny.gguf", "--chat", "Hi"),
     f"{FIXTURES / 'tiny-gguf' / 'tiny.gguf'}: tokenizer.chat_template: missing"),
    ((FIXTURES / "chat-qwen2", "--chat", "Hi", "--prompt", "Hi"), "not two of them"),
    ((FIXTURES / "chat-qwen2", "--system", "Be brief."), "a system message needs a --chat message"),
])
def test_cli_refuses_a_chat_it_cannot_render_in_one_line(args, message):
    result = invoke("run", *args)
    assert result.exit_code == 2
    assert message in result.stderr and result.stderr.count("\n") == 1


def test_run_chat_prints_the_assistants_reply_decoded():
    result = invoke("run", FIXTURES / "chat-qwen2", "--chat", "Hi", "--system", "Be brief.", "--max-new-tokens", "3")
    assert result.exit_code == 0, result.output
    last = result.output.splitlines()[-1]
    generated = result.output.splitlines()[-2]
    assert generated.startswith("request 0 generated ")
    pieces = generated.removeprefix("request 0 generated ").rsplit(" (", 1)[0].split(" ")
    assert last == "request 0 · assistant: " + "".join(p for p in pieces if p != "<|im_end|>")


def test_a_scenario_states_a_conversation_as_messages(tmp_path):
    golden = next(g for g in GOLDENS if g["checkpoint"].endswith("chat-qwen2") and len(g["messages"]) == 4)
    lines = [f"checkpoint: {FIXTURES / 'chat-qwen2'}", "requests:", "  - messages:"]
    for m in golden["messages"]:
        lines += [f"      - role: {m['role']}", f"        content: {json.dumps(m['content'], ensure_ascii=False)}"]
    path = tmp_path / "chat.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    request = load_scenario(path).requests[0]
    assert list(request.tokens) == golden["ids"]
    assert request.chat.messages[1] == Message("user", "A small model?")


@pytest.mark.parametrize(("messages", "line", "where", "words"), [
    ("      - role: user\n", 4, "requests[0].messages[0]", "missing required key 'content'"),
    ("      - role: user\n        content: Hi\n      - role: user\n        content: Again\n", 4,
     "requests[0].messages", "Conversation roles must alternate"),
])
def test_a_bad_message_is_refused_at_its_line(tmp_path, messages, line, where, words):
    path = tmp_path / "chat.yaml"
    path.write_text(f"checkpoint: {FIXTURES / 'chat-llama3'}\nrequests:\n  - messages:\n{messages}", encoding="utf-8")
    with pytest.raises(ScenarioError) as raised:
        load_scenario(path)
    assert (raised.value.line, raised.value.path) == (line, where)
    assert words in cause_words(raised.value.message, "en") and "\n" not in said(raised.value)


def test_the_timeline_starts_with_the_chat_its_messages_and_control_tokens():
    from tinyllm_tui.debugger.debugger import Debugger

    path = FIXTURES / "chat-qwen2"
    tokenizer = tokenizer_of(path)
    debugger = Debugger(load_checkpoint(path, chat=[[("system", "Be brief."), ("user", "The cat sat?")]]))
    chat = debugger.frame.timeline.chat
    ids = debugger.scenario.requests[0].tokens
    assert [(turn.role, turn.content) for turn in chat.turns] == [("system", "Be brief."), ("user", "The cat sat?")]
    for turn in chat.turns:
        first, last = turn.positions
        assert tokenizer.decode(list(ids[first : last + 1])) == turn.content
    assert sorted(chat.control) == [p for p, t in enumerate(ids) if tokenizer.id_to_token(t).startswith("<|im_")]
    assert (chat.tokens, chat.end_of_turn) == (len(ids), "<|im_end|>")


@pytest.mark.parametrize("width", [60, 80, 118, 200])
def test_the_chat_line_fits_its_width_keeping_each_message(width):
    from rich.cells import cell_len

    from tinyllm_tui.debugger.frame import ChatLine, ChatTurn
    from tinyllm_tui.tui.widgets.timeline import chat_text

    turns = (ChatTurn("system", "Be brief.", (35, 43)), ChatTurn("user", "我爱学习 " * 20, (52, 120)))
    for lang in ("en", "zh"):
        line = chat_text(ChatLine(turns, 130, frozenset(range(9)), "<|eot_id|>"), lang, width).plain
        assert cell_len(line) <= width and "\n" not in line
        assert '"Be brief."' in line and "52–120 \"我爱" in line
        if width == 200:  # room for all of it; narrower, the counts after the messages are what is cut
            assert ("ends at <|eot_id|>" if lang == "en" else "止于 <|eot_id|>") in line


def test_check_against_a_dump_of_a_chat_generates_as_many_tokens_as_the_dump_holds(tmp_path):
    dump = tmp_path / "reference.safetensors"
    model = FIXTURES / "chat-qwen2"
    assert invoke("run", model, "--chat", "Hi", "--max-new-tokens", "3", "--save-activations", dump).exit_code == 0
    result = invoke("check", model, "--chat", "Hi", "--against", dump)
    assert result.exit_code == 0, result.output
    assert "decode.2  sample.hook_choice  max |Δ| 0.000e+00" in result.output


def test_a_tokenizer_that_cannot_encode_the_rendered_chat_is_refused_in_one_line():
    from tokenizers import models, pre_tokenizers

    wordpiece = Tokenizer(models.WordPiece({"hi": 0, "[SEP]": 1}, unk_token="[UNK]"))  # its [UNK] is missing
    wordpiece.pre_tokenizer = pre_tokenizers.Whitespace()
    template = ChatTemplate("bert/tokenizer_config.json", "chat_template", "{{ messages[0].content }}", ())
    with pytest.raises(ScenarioError) as raised:
        tokenize_chat(template, wordpiece, [Message("user", "hi there")])
    assert said(raised.value).startswith("bert/tokenizer_config.json: chat_template: the tokenizer cannot encode the "
                                        "rendered chat (")
    assert "\n" not in said(raised.value)
