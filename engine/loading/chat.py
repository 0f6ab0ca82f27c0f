"""Chat templates: a conversation turned into the text an instruct model was trained on, then into ids.

    template = find_template(Path("SmolLM2-135M-Instruct.Q4_1.gguf"))
    chat = tokenize_chat(template, tokenizer, [Message("user", "What is the capital of France?")])

The template is the checkpoint's own (a GGUF's `tokenizer.chat_template`; a folder's `chat_template.jinja`, else
the `chat_template` of its tokenizer_config.json), rendered as transformers' `apply_chat_template` renders it: in
jinja2's ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the loopcontrols extension,
`raise_exception`, `strftime_now`, transformers' `tojson` (no HTML escaping), `dict` and `namespace`, the special
tokens' texts (`bos_token`, `eos_token`, …) and `add_generation_prompt`. The text is tokenized without the
tokenizer's own special tokens (the template writes them), so that a special token written in it becomes its id.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from pathlib import Path

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Encoding, Tokenizer

from engine.causes import Cause, cause
from engine.loading.document import ScenarioError
from engine.spec import Chat, Message
from engine.loading.gguf_file import GGUFFile
from engine.loading.tokenizer import tokenizer_errors

GGUF_KEY = "tokenizer.chat_template"
TEMPLATE_FILE, CONFIG_FILE = "chat_template.jinja", "tokenizer_config.json"
SPECIALS = {"bos": "bos", "eos": "eos", "unk": "unknown", "pad": "padding"}  # `<name>_token` -> GGUF's name
PROBE = "\u2063reply\u2063"  # an assistant reply no template changes, to find what ends a turn
LONGEST_MESSAGE = 160  # of an error's text; a template's error can quote the whole conversation


@dataclass(frozen=True)
class ChatTemplate:
    file: str  # where the template was read
    key: str  # its place in that file ("" for a whole file)
    text: str
    specials: tuple[tuple[str, str], ...]  # ("bos_token", "<s>") … as the template sees them

    def error(self, message: Cause) -> ScenarioError:
        return ScenarioError(self.file, None, self.key, message)


# -- finding the template ------------------------------------------------------------------------------

def find_template(path: Path) -> ChatTemplate:
    """The checkpoint's own chat template; refused, naming where it was looked for, when there is none."""
    if path.suffix == ".gguf":
        return _gguf_template(path)
    return _folder_template(path)


def _gguf_template(path: Path) -> ChatTemplate:
    meta = GGUFFile(path).meta
    text = meta.get(GGUF_KEY)
    if not isinstance(text, str) or not text.strip():
        raise ScenarioError(str(path), None, GGUF_KEY, cause("chat.no_gguf_template"))
    tokens = meta.get("tokenizer.ggml.tokens", ())
    specials = []
    for name, gguf_name in SPECIALS.items():
        index = meta.get(f"tokenizer.ggml.{gguf_name}_token_id")
        if isinstance(index, int) and 0 <= index < len(tokens):
            specials.append((f"{name}_token", tokens[index]))
    return ChatTemplate(str(path), GGUF_KEY, text, tuple(specials))


def _folder_template(folder: Path) -> ChatTemplate:
    """As transformers reads a folder: chat_template.jinja first, else tokenizer_config.json's chat_template
    (a list of named templates: the one named default)."""
    config_file = folder / CONFIG_FILE
    config = _json(config_file) if config_file.exists() else {}
    specials = tuple((f"{name}_token", text) for name in SPECIALS
                     if (text := _token_text(config.get(f"{name}_token"))) is not None)
    if (folder / TEMPLATE_FILE).exists():
        return ChatTemplate(str(folder / TEMPLATE_FILE), "", _read(folder / TEMPLATE_FILE), specials)
    text = config.get("chat_template")
    if isinstance(text, list):
        text = next((t.get("template") for t in text if isinstance(t, dict) and t.get("name") == "default"), None)
    if not isinstance(text, str) or not text.strip():
        raise ScenarioError(str(folder), None, "chat_template", cause("chat.no_template", template_file=TEMPLATE_FILE,
                                                                      config_file=CONFIG_FILE))
    return ChatTemplate(str(config_file), "chat_template", text, specials)


def _read(file: Path) -> str:
    try:
        return file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ScenarioError(str(file), None, "", cause("chat.unreadable", error=type(error).__name__)) from None


def _json(file: Path) -> dict:
    try:
        value = json.loads(_read(file))
    except json.JSONDecodeError as error:
        raise ScenarioError(str(file), error.lineno, "", cause("chat.not_json", msg=error.msg)) from None
    if not isinstance(value, dict):
        raise ScenarioError(str(file), None, "", cause("chat.not_object"))
    return value


def _token_text(value) -> str | None:
    """A tokenizer_config.json special token: its text, or an AddedToken written as {"content": …}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


# -- rendering -----------------------------------------------------------------------------------------

def render(template: ChatTemplate, messages: list[Message] | tuple[Message, ...], *,
           add_generation_prompt: bool = True, **variables) -> str:
    """The template's text for `messages`; `variables` are further names the template may read
    (transformers passes apply_chat_template's extra keyword arguments the same way)."""
    names = dict(template.specials) | variables
    conversation = [{"role": m.role, "content": m.content} for m in messages]
    try:
        compiled = _compiled(template.text)
        return compiled.render(messages=conversation, tools=None, documents=None,
                               add_generation_prompt=add_generation_prompt, **names)
    except jinja2.TemplateSyntaxError as error:
        raise template.error(cause("chat.syntax", lineno=error.lineno, why=_one_line(error.message))) \
            from None
    except jinja2.TemplateError as error:  # raise_exception, an undefined name used, the sandbox's refusals
        raise template.error(cause("chat.refused", at=_template_line(error), why=_one_line(str(error)))) from None
    except Exception as error:  # the template's own code: a wrong type, a missing key, a recursion
        raise template.error(cause("chat.failed", at=_template_line(error), error=type(error).__name__,
                                   why=_one_line(str(error)))) from None


@cache
def _compiled(text: str) -> jinja2.Template:
    return _environment().from_string(text)


@cache
def _environment() -> ImmutableSandboxedEnvironment:
    """transformers' environment (utils/chat_template_utils.py): the same options, globals and filter."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda format: datetime.now().strftime(format)
    env.globals["dict"] = Dict()
    env.globals["namespace"] = Namespace
    return env


class Dict:
    """dict() and dict.fromkeys() without the type itself, whose attributes lead out (as transformers does)."""

    def __call__(self, *args, **kwargs):
        return dict(*args, **kwargs)

    def fromkeys(self, *args, **kwargs):
        return dict.fromkeys(*args, **kwargs)


class Namespace(jinja2.utils.Namespace):
    """jinja2's namespace() refusing underscore names, which lead to CPython's internals (as transformers does)."""

    def __init__(*args, **kwargs):  # jinja2's own signature trick: namespace(self=…) stays a plain name
        self, values = args[0], dict(*args[1:], **kwargs)
        for name in values:
            Namespace._check(name)
        jinja2.utils.Namespace.__init__(self, values)

    def __setitem__(self, name, value):
        Namespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"a namespace cannot hold the underscore name {name!r}")


class Generation(jinja2.ext.Extension):
    """`{% generation %}…{% endgeneration %}`, which transformers' templates may hold to mark what the
    assistant wrote: rendered as its body."""

    tags = {"generation"}

    def parse(self, parser):
        line = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(line)

    def _body(self, caller):
        return caller()


def _raise_exception(message):
    raise jinja2.TemplateError(message)


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _template_line(error: BaseException) -> Cause:
    """" at line N" of the template where jinja2's traceback says the error happened."""
    trace, line = error.__traceback__, None
    while trace is not None:
        if trace.tb_frame.f_code.co_filename == "<template>":
            line = trace.tb_lineno
        trace = trace.tb_next
    return cause("chat.no_line") if line is None else cause("chat.at_line", line=line)


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= LONGEST_MESSAGE else text[: LONGEST_MESSAGE - 1] + "…"


# -- tokenizing ----------------------------------------------------------------------------------------

def tokenize_chat(template: ChatTemplate, tokenizer: Tokenizer, messages: list[Message] | tuple[Message, ...],
                  **variables) -> Chat:
    """The conversation rendered with the generation prompt, tokenized as apply_chat_template tokenizes it."""
    if not messages:
        raise template.error(cause("chat.no_messages"))
    text = render(template, messages, **variables)
    encoding = _encoded(template, tokenizer, text)
    if not encoding.ids:
        raise template.error(cause("chat.no_text"))
    specials = _special_ids(tokenizer)
    spans = _content_spans(text, messages)
    sources = tuple(next((i for i, (start, end) in spans if start < token_end and token_start < end), None)
                    for token_start, token_end in encoding.offsets)
    return Chat(tuple(messages), text, tuple(encoding.ids), sources, tuple(t in specials for t in encoding.ids),
                end_of_turn(template, tokenizer, messages, **variables))


def _encoded(template: ChatTemplate, tokenizer: Tokenizer, text: str) -> Encoding:
    """The rendered text's encoding; what `tokenizers` raises (a WordPiece vocabulary without its [UNK], a
    panic) refused in one line."""
    with tokenizer_errors(lambda message: template.error(cause("chat.cannot_encode", why=message))):
        return tokenizer.encode(text, add_special_tokens=False)


def _special_ids(tokenizer: Tokenizer) -> frozenset[int]:
    return frozenset(i for i, token in tokenizer.get_added_tokens_decoder().items() if token.special)


def _content_spans(text: str, messages) -> list[tuple[int, tuple[int, int]]]:
    """(message, (start, end)) of each message's content in the rendered text, found in order."""
    spans, start = [], 0
    for index, message in enumerate(messages):
        content = message.content.strip()
        found = text.find(content, start) if content else -1
        if found >= 0:
            spans.append((index, (found, found + len(content))))
            start = found + len(content)
    return spans


def end_of_turn(template: ChatTemplate, tokenizer: Tokenizer, messages, **variables) -> int | None:
    """The first special token the template writes after an assistant's reply: the conversation with a
    reply added is rendered, and what follows the reply tokenized (<|im_end|> for ChatML, <|eot_id|> for
    Llama 3, </s> for Llama 2). None where the template writes none or refuses such a conversation."""
    try:
        text = render(template, [*messages, Message("assistant", PROBE)], add_generation_prompt=False, **variables)
    except ScenarioError:
        return None
    after = text.rfind(PROBE)
    if after < 0:
        return None
    specials = _special_ids(tokenizer)
    tail = _encoded(template, tokenizer, text[after + len(PROBE):]).ids
    return next((t for t in tail if t in specials), None)
