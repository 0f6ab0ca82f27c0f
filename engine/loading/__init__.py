"""Reading models: scenario files (YAML, weight files), Hugging Face folders and GGUF files.

`open_model` is the one entry point: it dispatches on what the path is.
"""

from __future__ import annotations

from pathlib import Path

from engine.causes import cause
from engine.loading.document import ScenarioError
from engine.loading.file_kinds import SCENARIO_SUFFIXES, is_checkpoint
from engine.loading.scenario_file import load_scenario, load_scenario_text
from engine.scenario import Scenario
from engine.spec import Message

__all__ = ["Scenario", "ScenarioError", "is_checkpoint", "load_checkpoint", "load_scenario", "load_scenario_text",
           "open_model"]


def open_model(path: str | Path, *, prompt: str | list[str] | None = None,
               ids: list[int] | list[list[int]] | None = None, chat: list[list[Message]] | None = None,
               max_new_tokens: int | None = None, dtype: str = "float64", max_memory: int | None = None) -> Scenario:
    """A checkpoint or a scenario file, whichever `path` is: the one entry the CLI needs. A folder is
    taken for a checkpoint (one without config.json is refused as such), unless it is named like a scenario."""
    if is_checkpoint(path) or (Path(path).is_dir() and Path(path).suffix not in SCENARIO_SUFFIXES):
        from engine.loading.checkpoint import load_checkpoint

        return load_checkpoint(path, prompt=prompt, ids=ids, chat=chat, max_new_tokens=max_new_tokens or 1,
                               dtype=dtype, max_memory=max_memory)
    options = (("--prompt", prompt), ("--ids", ids), ("--chat", chat), ("--max-new-tokens", max_new_tokens))
    for option, value in options:
        if value is not None:
            raise ScenarioError(str(path), None, option, cause("checkpoint.only"))
    return load_scenario(path, dtype=dtype, max_memory=max_memory)


def __getattr__(name: str):
    """`load_checkpoint`, imported on first use: the checkpoint readers' libraries (gguf, jinja2, the Hugging
    Face tables) load only when a checkpoint is opened, not with every scenario file."""
    if name == "load_checkpoint":
        from engine.loading.checkpoint import load_checkpoint

        return load_checkpoint
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
