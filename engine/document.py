"""A YAML document read with ruamel.yaml, walked with positions for error messages.

Every value is reached through a `Node` that knows its path in the document
(`weights.blocks[0].attn.wq`) and its line, so any problem becomes one
`ScenarioError` saying file:line: path: what.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq, TaggedScalar
from ruamel.yaml.error import MarkedYAMLError, YAMLError


class ScenarioError(ValueError):
    """An invalid scenario: names the file, the line and the path inside the document."""

    def __init__(self, file: str, line: int | None, path: str, message: str):
        self.file, self.line, self.path, self.message = file, line, path, message
        where = f"{file}:{line}" if line else file
        super().__init__(f"{where}: {path}: {message}" if path else f"{where}: {message}")


def round_trip_yaml() -> YAML:
    """The YAML reader/writer that keeps comments, key order and quoting.

    The indentation is the scenarios' own (`key:` then `  - [row]`), so a file written
    back differs from the one read only where values changed.
    """
    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.width = 4096  # never fold a long matrix row
    return yaml


def parse(text: str | bytes, file: str) -> Any:
    """Parse scenario text into ruamel's round-trip tree, or raise ScenarioError."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as error:
            line = text[: error.start].count(b"\n") + 1
            raise ScenarioError(file, line, "", f"not UTF-8 text (byte {error.start})") from None
    try:
        return round_trip_yaml().load(text)
    except MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = mark.line + 1 if mark else None
        raise ScenarioError(file, line, "", f"YAML syntax: {error.problem or error}") from None
    except YAMLError as error:
        raise ScenarioError(file, None, "", f"YAML: {error}") from None


def read_document(path: Path) -> Any:
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ScenarioError(str(path), None, "", f"cannot read ({error.strerror})") from None
    return parse(data, str(path))


@dataclass(frozen=True)
class Node:
    """One value of the document with where it stands."""

    value: Any
    path: str
    line: int | None
    file: str

    def error(self, message: str) -> ScenarioError:
        return ScenarioError(self.file, self.line, self.path, message)

    def _child_path(self, key: str | int) -> str:
        if isinstance(key, int):
            return f"{self.path}[{key}]"
        return f"{self.path}.{key}" if self.path else key

    # -- mappings ---------------------------------------------------------------
    def mapping(self, allowed: set[str], required: set[str] = frozenset()) -> Node:
        """Check this is a mapping with only `allowed` keys and all `required` ones."""
        _refuse_tag(self)
        if not isinstance(self.value, CommentedMap):
            raise self.error(f"expected a mapping, got {_kind(self.value)}")
        for key in self.value:
            if key not in allowed:
                child = self._at_key(key)
                raise child.error(f"unknown key (expected one of: {', '.join(sorted(allowed))})")
        missing = sorted(required - set(self.value))
        if missing:
            raise self.error(f"missing required key {missing[0]!r}")
        return self

    def _at_key(self, key: str) -> Node:
        line = self.value.lc.key(key)[0] + 1
        return Node(self.value[key], self._child_path(str(key)), line, self.file)

    def has(self, key: str) -> bool:
        return key in self.value

    def get(self, key: str) -> Node:
        line = self.value.lc.value(key)[0] + 1 if key in self.value else self.line
        return Node(self.value.get(key), self._child_path(key), line, self.file)

    # -- sequences --------------------------------------------------------------
    def items(self) -> list[Node]:
        _refuse_tag(self)
        if not isinstance(self.value, CommentedSeq):
            raise self.error(f"expected a list, got {_kind(self.value)}")
        return [
            Node(item, self._child_path(i), self.value.lc.item(i)[0] + 1, self.file)
            for i, item in enumerate(self.value)
        ]

    # -- scalars ----------------------------------------------------------------
    def number(self) -> float:
        _refuse_tag(self)
        value = self.value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(f"expected a number, got {_kind(value)}")
        if not math.isfinite(value):
            raise self.error(f"expected a finite number, got {value}")
        return float(value)

    def integer(self, minimum: int | None = None) -> int:
        _refuse_tag(self)
        if isinstance(self.value, bool) or not isinstance(self.value, int):
            raise self.error(f"expected an integer, got {_kind(self.value)}")
        if minimum is not None and self.value < minimum:
            raise self.error(f"expected an integer ≥ {minimum}, got {self.value}")
        return int(self.value)

    def boolean(self) -> bool:
        _refuse_tag(self)
        if not isinstance(self.value, bool):
            raise self.error(f"expected true or false, got {_kind(self.value)}")
        return self.value

    def text(self) -> str:
        _refuse_tag(self)
        if not isinstance(self.value, str):
            raise self.error(f"expected text, got {_kind(self.value)}")
        return str(self.value)

    def choice(self, options: tuple[str, ...]) -> str:
        value = self.text()
        if value not in options:
            raise self.error(f"expected one of {', '.join(options)}, got {value!r}")
        return value


def _refuse_tag(node: Node) -> None:
    """Refuse explicit tags (`!!python/object`, `!custom`): a scenario is plain data."""
    tag = getattr(node.value, "tag", None)
    tag = str(getattr(tag, "value", tag) or "")
    standard = tag.startswith("tag:yaml.org,2002:") and "python/" not in tag
    if isinstance(node.value, TaggedScalar) or (tag and not standard):
        raise node.error(f"tag {tag} is not allowed: a scenario holds plain data only")


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return f"boolean {value}"
    if isinstance(value, (int, float)):
        return f"number {value}"
    if isinstance(value, str):
        return f"text {value!r}"
    if isinstance(value, CommentedMap):
        return "a mapping"
    if isinstance(value, CommentedSeq):
        return "a list"
    return type(value).__name__
