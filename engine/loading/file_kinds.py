"""Which kind of file a path names, told from the path alone: a checkpoint or a scenario file. Kept apart from
the checkpoint readers so that opening a scenario file loads none of their libraries (gguf, jinja2)."""

from __future__ import annotations

from pathlib import Path

SCENARIO_SUFFIXES = (".yaml", ".yml")


def is_checkpoint(path: str | Path) -> bool:
    """A .gguf file, a folder with config.json, or that config.json itself."""
    path = Path(path)
    return path.suffix == ".gguf" or (path.is_dir() and (path / "config.json").exists()) or path.name == "config.json"
