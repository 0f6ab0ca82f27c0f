"""A YAML document, composed by PyYAML's C parser and walked with positions for error messages.

Reading builds no Python objects for the document as a whole: PyYAML's `CSafeLoader`
composes a node tree (every node knows its line), and values are read from it on the way.
Scalars resolve by YAML 1.2's core schema, as ruamel.yaml reads them (`no` is text,
`1e-5` a number). ruamel's round-trip tree is built only to save edits (`round_trip_yaml`).

Every value is reached through a `Node` that knows its path in the document
(`weights.blocks[0].attn.wq`) and its line, so any problem becomes one
`ScenarioError` saying file:line: path: what.
"""

from __future__ import annotations

import math
import os
import re
import warnings
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import yaml
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

from engine.causes import Cause, cause
from engine.progress import READING, report

if TYPE_CHECKING:
    from ruamel.yaml import YAML


MAX_PATH_CHARS, MAX_MESSAGE_CHARS = 200, 800  # a name or message a file makes longer is cut
UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def one_line(text: str, limit: int | None = None) -> str:
    """`text` safe to print as part of one line: control characters (newlines, escape sequences, NULs),
    line separators, bidi overrides and lone surrogates escaped as Python writes them, cut to `limit`."""
    text = UNPRINTABLE.sub(lambda m: repr(m.group())[1:-1], text)
    if limit is not None and len(text) > limit:
        text = f"{text[:limit]}… ({len(text) - limit} more characters)"
    return text


def library_text(error: BaseException) -> str:
    """A library's own error message, its lines folded into one (tokenizers and safetensors write several)."""
    return " ".join(str(error).split()) or type(error).__name__


class ScenarioError(ValueError):
    """An invalid scenario: names the file, the line and the path inside the document. Its text is always
    one printable line, whatever names or values from the file it holds."""

    def __init__(self, file: str, line: int | None, path: str, message: Cause):
        """`message`: a cause (engine.causes) a front end words (tinyllm_tui.debugger.errors.bad_input);
        `str(error)` holds it unworded."""
        self.file, self.line, self.path, self.message = file, line, path, message
        super().__init__(located(file, line, path, str(message)))


def located(file: str, line: int | None, path: str, message: str) -> str:
    """`file:line: path: message` as one printable line."""
    where = one_line(f"{file}:{line}" if line else file)
    message = one_line(message, MAX_MESSAGE_CHARS)
    return f"{where}: {one_line(path, MAX_PATH_CHARS)}: {message}" if path else f"{where}: {message}"


def inner(error: ScenarioError) -> Cause:
    """A refusal said inside another's (a chat template's, at the request it refused): where it is, and why."""
    where = f"{error.file}:{error.line}" if error.line else error.file
    if error.path:
        return cause("doc.at_path", where=where, path=error.path, why=error.message)
    return cause("doc.at", where=where, why=error.message)


def joined(names, code: str) -> str | Cause:
    """`tokens and ids and text` (code doc.and), `.safetensors or .npz` (doc.or): the names as a cause, which
    the words join."""
    first, *rest = names
    return cause(code, first=first, rest=joined(rest, code)) if rest else first


class LoaderWarning(UserWarning):
    """Something a file holds that is legal but almost certainly not meant: where, and why (a cause a front end
    words: tinyllm_tui.debugger.errors.warning_words); `str(warning)` is located, its cause unworded."""

    def __init__(self, file: str, path: str, why: Cause):
        super().__init__(located(file, None, path, str(why)))
        self.file, self.path, self.cause = file, path, why


def warn(file: str, path: str, why: Cause) -> None:
    warnings.warn(LoaderWarning(file, path, why), stacklevel=3)


def round_trip_yaml() -> YAML:
    """The YAML reader/writer that keeps comments, key order and quoting.

    The indentation is the scenarios' own (`key:` then `  - [row]`), so a file written
    back differs from the one read only where values changed (ruamel loads here: reading a file never needs it).
    """
    from ruamel.yaml import YAML

    yaml_rt = YAML()
    yaml_rt.preserve_quotes = True
    yaml_rt.indent(mapping=2, sequence=4, offset=2)
    yaml_rt.width = 4096  # never fold a long matrix row
    return yaml_rt


# -- parsing ----------------------------------------------------------------------------------
TAG = "tag:yaml.org,2002:"
INT, FLOAT, BOOL, NULL, STR = (TAG + kind for kind in ("int", "float", "bool", "null", "str"))
CORE_SCHEMA = [  # YAML 1.2 core schema, as ruamel.yaml resolves plain scalars
    (BOOL, r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
    (INT, r"^(?:[-+]?0b[0-1_]+|[-+]?0o?[0-7_]+|[-+]?[0-9_]+|[-+]?0x[0-9a-fA-F_]+)$", "-+0123456789"),
    (FLOAT, r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?|[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)"
            r"|\.[0-9_]+(?:[eE][-+][0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$", "-+0123456789."),
    (NULL, r"^(?:~|null|Null|NULL|)$", ("~", "n", "N", "")),
]


CORE_PATTERNS = [(tag, re.compile(pattern), first) for tag, pattern, first in CORE_SCHEMA]


class _Loader(yaml.CSafeLoader):
    """PyYAML's C parser and composer, with the core schema's implicit tags (memoised: a
    matrix repeats few distinct numbers, and PyYAML's own resolver is pure Python)."""

    def resolve(self, kind, value, implicit):
        if kind is ScalarNode:
            return _plain_tag(value) if implicit[0] else STR
        return SEQ if kind is SequenceNode else MAP


def _plain_tag(text: str, memo: dict[str, str] = {}) -> str:  # noqa: B006 (the memo is the point)
    tag = memo.get(text)
    if tag is None:
        first = text[:1]
        tag = next((t for t, pattern, starts in CORE_PATTERNS if first in starts and pattern.match(text)), STR)
        if len(memo) < 1 << 16:
            memo[text] = tag
    return tag


SEQ, MAP = TAG + "seq", TAG + "map"
PLAIN_TAGS = {INT, FLOAT, BOOL, NULL, STR, SEQ, MAP}


MAX_SCENARIO_BYTES = 64 << 20  # ten times the largest inline scenario measured; bigger weights go in a weight file
MAX_SCENARIO_VALUES = 4_000_000  # PyYAML's nodes take ~300 bytes each: at most ~1.2 GB to parse any file


def read_text(path: Path) -> str:
    """A scenario file's text, or ScenarioError (unreadable, too big, not UTF-8).

    At most MAX_SCENARIO_BYTES + 1 bytes are ever read, whatever the file (or /dev/zero) holds."""
    try:
        with path.open("rb") as file:
            size = os.fstat(file.fileno()).st_size
            # read(n) reserves n bytes up front: ask for the size the file has (a pipe or device says 0)
            data = b"" if size > MAX_SCENARIO_BYTES else file.read(size + 1) if size else _read_capped(file)
    except OSError as error:
        raise ScenarioError(str(path), None, "", cause("doc.unreadable", why=error.strerror or str(error))) from None
    if size > MAX_SCENARIO_BYTES or len(data) > MAX_SCENARIO_BYTES:
        raise ScenarioError(str(path), None, "", cause("doc.too_big", mib=MAX_SCENARIO_BYTES >> 20))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise ScenarioError(str(path), line, "", cause("doc.not_text", byte=error.start)) from None


def _opened(problem: str, context: str, line: int) -> Cause:
    """The problem, and where what the parser was in opened: its context 'while parsing a flow sequence' says
    'in the flow sequence opened at line 3' (PyYAML's words for the thing, the catalogue's for the rest)."""
    within = re.match(r"^while (?:parsing|scanning) an? (.*)$", context)
    if within is None:
        return cause("doc.yaml_opened_context", problem=problem, context=context, line=line)
    return cause("doc.yaml_opened", problem=problem, thing=within.group(1), line=line)


def _read_capped(file) -> bytes:
    """A stream without a size (a pipe, /dev/zero), a MiB at a time, stopping past the limit."""
    chunks, total = [], 0
    while total <= MAX_SCENARIO_BYTES and (chunk := file.read(1 << 20)):
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def parse(text: str, file: str) -> yaml.Node | None:
    """Compose scenario text into PyYAML's node tree, or raise ScenarioError."""
    values = text.count(",") + text.count("\n") + text.count("- ")  # at least one per node (C speed)
    if values > MAX_SCENARIO_VALUES:
        raise ScenarioError(file, None, "", cause("doc.too_many_values", values=values,
                                                        limit=MAX_SCENARIO_VALUES))
    try:
        return yaml.compose(_Reading(text), Loader=_Loader)
    except yaml.MarkedYAMLError as error:
        problem, opened = error.problem or str(error), error.context_mark  # PyYAML's words
        mark, why = error.problem_mark or opened, cause("doc.yaml_syntax", problem=problem)
        if error.context and "end of stream" in problem:  # an unclosed quote or bracket: say where it opened
            mark, why = opened, cause("doc.yaml_unclosed", context=error.context, problem=problem)
        elif error.context and opened and opened.line != mark.line:  # found later than the cause: say both lines
            why = _opened(problem, error.context, opened.line + 1)
        line = mark.line + 1 if mark else None
        raise ScenarioError(file, line, "", why) from None
    except yaml.reader.ReaderError as error:  # a control character: its own message spans two lines
        line = text.encode("utf-8")[: error.position].count(b"\n") + 1  # the position counts UTF-8 bytes
        raise ScenarioError(file, line, "", cause("doc.yaml_character", character=f"{error.character:04x}",
                                                        reason=error.reason)) from None
    except yaml.YAMLError as error:
        raise ScenarioError(file, None, "", cause("doc.yaml", problem=library_text(error))) from None


class _Reading:
    """The text as a stream: the C parser pulls it in 16 KiB read()s, each reported (engine.progress)
    as bytes taken of the whole; a listener that raises stops the parse there."""

    name = "<unicode string>"  # what PyYAML calls a text it is given whole, so messages stay the same

    def __init__(self, text: str):
        self.text, self.at, self.done, self.total = text, 0, 0, len(text.encode("utf-8"))

    def read(self, size: int) -> str:
        chunk = self.text[self.at : self.at + size]
        self.at += len(chunk)
        self.done += len(chunk.encode("utf-8"))
        report(READING, self.done, self.total)
        return chunk


@dataclass(frozen=True)
class Tagged:
    """A value under an explicit tag (`!custom`, `!!python/…`): never constructed, always refused."""

    tag: str
    text: str


def scalar_value(node: ScalarNode) -> Any:
    text, tag = node.value, node.tag
    if tag == STR:
        return text
    if tag == FLOAT:
        plain = text.replace("_", "").lower()
        if plain.lstrip("+-") == ".inf":
            return -math.inf if plain[0] == "-" else math.inf
        return math.nan if plain == ".nan" else float(plain)
    if tag == INT:
        return _integer(text.replace("_", ""), text)
    if tag == BOOL:
        return text.lower() == "true"
    if tag == NULL:
        return None
    return Tagged(tag, text)


def _integer(plain: str, text: str) -> int | float | str:
    """`0x1F`, `017` (decimal, as YAML 1.2 reads it); past Python's 4300-digit limit a float (inf);
    no digits at all (`0x_`, `+_`) the text it is."""
    for parse in (lambda: int(plain, 0), lambda: int(plain, 10), lambda: float(plain)):
        try:
            return parse()
        except ValueError:
            continue
    return text


# -- walking ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Node:
    """One value of the document with where it stands."""

    raw: yaml.Node | None
    path: str
    line: int | None
    file: str

    def error(self, message: Cause) -> ScenarioError:
        return ScenarioError(self.file, self.line, self.path, message)

    @cached_property
    def value(self) -> Any:
        """The Python value of a scalar; the raw node of a mapping or a list."""
        if isinstance(self.raw, ScalarNode):
            return scalar_value(self.raw)
        return self.raw

    @property
    def printed(self) -> str:
        """A scalar exactly as written (`0.5000`: four decimals)."""
        return self.raw.value if isinstance(self.raw, ScalarNode) else ""

    @property
    def is_mapping(self) -> bool:
        return isinstance(self.raw, MappingNode)

    def _child(self, key: str | int, raw: yaml.Node) -> Node:
        path = f"{self.path}[{key}]" if isinstance(key, int) else f"{self.path}.{key}" if self.path else key
        return Node(raw, path, raw.start_mark.line + 1, self.file)

    # -- mappings ---------------------------------------------------------------
    @cached_property
    def _entries(self) -> dict[str, tuple[yaml.Node, yaml.Node]]:
        entries: dict = {}
        for key, value in self.raw.value if self.is_mapping else ():
            name = key.value if isinstance(key, ScalarNode) else "?"
            if name in entries:
                raise self._child(name, key).error(cause("doc.duplicate_key"))
            entries[name] = (key, value)
        return entries

    def mapping(self, allowed: set[str], required: set[str] = frozenset()) -> Node:
        """Check this is a mapping with only `allowed` keys and all `required` ones."""
        _refuse_tag(self)
        if not self.is_mapping:
            raise self.error(cause("doc.mapping", got=_kind(self)))
        for name, (key, _) in self._entries.items():
            if name not in allowed:
                raise self._child(name, key).error(cause("doc.unknown_key",
                                                                        keys=", ".join(sorted(allowed))))
        missing = sorted(required - set(self._entries))
        if missing:
            raise self.error(cause("doc.missing_key", key=missing[0]))
        return self

    def has(self, key: str) -> bool:
        return key in self._entries

    def get(self, key: str) -> Node:
        if key in self._entries:
            return self._child(key, self._entries[key][1])
        return Node(None, self._child_path(key), self.line, self.file)

    def _child_path(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    # -- sequences --------------------------------------------------------------
    def items(self) -> list[Node]:
        _refuse_tag(self)
        if not isinstance(self.raw, SequenceNode):
            raise self.error(cause("doc.list", got=_kind(self)))
        return [self._child(i, item) for i, item in enumerate(self.raw.value)]

    def numbers(self, ndim: int) -> np.ndarray | None:
        """A vector (ndim 1) or a list of rows (ndim 2) of plain finite numbers as one float64
        array, fast; None for anything else: the caller then walks cell by cell to report the
        first bad cell with its line."""
        try:
            rows = _plain_list(self.raw) if ndim == 2 else [self.raw]
            array = np.array([[_plain_number(cell) for cell in _plain_list(row)] for row in rows], dtype=np.float64)
        except (AttributeError, TypeError, ValueError):
            return None
        if array.ndim != 2 or not np.isfinite(array).all():
            return None
        return array if ndim == 2 else array[0]

    def texts(self) -> tuple[str, ...] | None:
        """A list of plain text scalars as a tuple, fast (a 50 000-token vocabulary); None otherwise."""
        try:
            items = _plain_list(self.raw)
        except ValueError:
            return None
        if all(isinstance(item, ScalarNode) and item.tag == STR for item in items):
            return tuple(item.value for item in items)
        return None

    # -- scalars ----------------------------------------------------------------
    def number(self) -> float:
        _refuse_tag(self)
        value = self.value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(cause("doc.number", got=_kind(self)))
        if not math.isfinite(value):
            raise self.error(cause("doc.finite", value=value))
        return float(value)

    def integer(self, minimum: int | None = None) -> int:
        _refuse_tag(self)
        if isinstance(self.value, bool) or not isinstance(self.value, int):
            raise self.error(cause("doc.integer", got=_kind(self)))
        if minimum is not None and self.value < minimum:
            raise self.error(cause("doc.integer_min", minimum=minimum, value=self.value))
        return int(self.value)

    def boolean(self) -> bool:
        _refuse_tag(self)
        if not isinstance(self.value, bool):
            raise self.error(cause("doc.boolean", got=_kind(self)))
        return self.value

    def text(self) -> str:
        _refuse_tag(self)
        if not isinstance(self.value, str):
            raise self.error(cause("doc.text", got=_kind(self)))
        return self.value

    def choice(self, options: tuple[str, ...]) -> str:
        value = self.text()
        if value not in options:
            raise self.error(cause("doc.choice", options=", ".join(options), value=value))
        return value


def _plain_list(node: yaml.Node) -> list:
    if not isinstance(node, SequenceNode) or node.tag != SEQ:
        raise ValueError
    return node.value


def _plain_number(cell: yaml.Node) -> str:
    """The text of an untagged int or float scalar (NumPy parses it); anything else raises."""
    if cell.tag not in (INT, FLOAT) or not isinstance(cell, ScalarNode) or "_" in cell.value:
        raise ValueError
    return cell.value


def _refuse_tag(node: Node) -> None:
    """Refuse explicit tags (`!!python/object`, `!custom`): a scenario is plain data."""
    if node.raw is not None and node.raw.tag not in PLAIN_TAGS:
        raise node.error(cause("doc.tag", tag=node.raw.tag))


def _kind(node: Node) -> Cause:
    """What the node holds, as a refusal names it (`got text 'x'`)."""
    value = node.value
    if value is None:
        return cause("value.nothing")
    if isinstance(value, bool):
        return cause("value.boolean", value=value)
    if isinstance(value, (int, float)):
        return cause("value.number", value=value)
    if isinstance(value, str):
        return cause("value.text", value=value) if len(value) <= 40 else cause("value.text_long", start=value[:40],
                                                                                 length=len(value))
    if node.is_mapping:
        return cause("value.mapping")
    if isinstance(node.raw, SequenceNode):
        return cause("value.list")
    return cause("value.other", name=type(value).__name__)
