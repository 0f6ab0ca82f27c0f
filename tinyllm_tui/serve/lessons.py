"""What a class is served: the files (lessons), each copied into every learner's own folder, and the limits.

A scenario YAML comes with the files it names (`checkpoint:`, `weights: {file: …}`), which must lie beside it
or below, so that the copy is whole; a checkpoint (a .gguf file or a Hugging Face folder) is copied as it is.
"""

from __future__ import annotations

import re
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

import yaml

from tinyllm_tui.debugger.errors import OptionError, file_error
from tinyllm_tui.debugger.opening import ModelOptions, load, memory_limit
from tinyllm_tui.tui.i18n import cause_words

DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(s|m|h)?\s*", re.IGNORECASE)
SECONDS = {"s": 1, "m": 60, "h": 3600}


@dataclass(frozen=True)
class Limits:
    max_sessions: int
    idle_timeout: float  # seconds without a key, a click or a resize from the browser
    max_memory: int  # bytes: the app's --max-memory, and its process's data limit
    grace: float = 3.0  # seconds a process has to end after "quit" before it is killed
    columns: int = 240  # the largest terminal a browser may ask for
    rows: int = 80


@dataclass(frozen=True)
class Lesson:
    """One served file: `source` and the files it names, as paths relative to its folder."""

    source: Path
    companions: tuple[Path, ...] = ()

    @property
    def name(self) -> str:
        return self.source.name

    def copy_into(self, folder: Path) -> str:
        """Copy the file (and what it names) into `folder`; returns the name the app opens there."""
        for relative in (Path(self.name), *self.companions):
            origin, copy = self.source.parent / relative, folder / relative
            copy.parent.mkdir(parents=True, exist_ok=True)
            if origin.is_dir():
                shutil.copytree(origin, copy)
            else:
                shutil.copyfile(origin, copy)
        return self.name


def lesson(file: Path) -> Lesson:
    """The lesson on `file`, once the file has opened as the debugger would open it (a bad one is refused)."""
    load(file, ModelOptions())
    if file.is_dir() or file.suffix == ".gguf":
        return Lesson(file)
    document = yaml.load(file.read_text(encoding="utf-8"), Loader=yaml.CSafeLoader) or {}
    weights = document.get("weights")
    named = [("checkpoint", document.get("checkpoint")),
             ("weights.file", weights.get("file") if isinstance(weights, dict) else None)]
    companions = []
    for key, text in named:
        if text is None:
            continue
        relative = Path(str(text))
        if relative.is_absolute() or ".." in relative.parts or str(text).startswith("~"):
            raise file_error(str(file), key, "option.serve_relative", text=text)
        companions.append(relative)
    return Lesson(file, tuple(companions))


def parse_duration(text: str) -> float:
    """`15m`, `90s`, `1h`, `30` (seconds) -> seconds."""
    match = DURATION.fullmatch(text)
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"expected a duration such as 15m, 90s or 1h, got {text!r}")
    return float(match.group(1)) * SECONDS[(match.group(2) or "s").lower()]


def new_token() -> str:
    return secrets.token_urlsafe(16)


def limits(max_sessions: int, idle_timeout: str, max_memory: str) -> Limits:
    """The limits from the command line's text; a bad value raises ValueError naming it."""
    if max_sessions < 1:
        raise ValueError(f"--max-sessions: expected at least 1, got {max_sessions}")
    try:
        idle = parse_duration(idle_timeout)
    except ValueError as error:
        raise ValueError(f"--idle-timeout: {error}") from None
    try:
        memory = memory_limit(max_memory)
    except OptionError as error:
        raise ValueError(f"{error.option}: {cause_words(error.cause, 'en')}") from None
    return Limits(max_sessions, idle, memory)
