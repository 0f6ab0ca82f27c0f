"""The commands that need no debugging session: a head's gradient check, moving weights into a file, reading
a --against dump."""

from __future__ import annotations

from pathlib import Path

from engine import load_scenario
from engine.causes import CausedError, cause
from engine.compare.dump import Dump, load_dump
from engine.compare.gradcheck import NotSoftmaxHead, check_head
from engine.loading.edits import convert_scenario
from tinyllm_tui.debugger.errors import OptionError


def gradcheck(scenario, request: int, layer: int, head: int):
    """One attention head's analytic dL/dQ against central finite differences (`.relative_error`, `.analytic`)."""
    try:
        return check_head(scenario, request=request, layer=layer, head=head)
    except NotSoftmaxHead as error:
        raise OptionError("--layer", error.cause) from None
    except CausedError as error:
        raise OptionError("", error.cause) from None


def convert(file: Path, weights: Path, target: Path) -> Path:
    """The scenario's weights into `weights`, and a YAML at `target` that names it (comments kept)."""
    try:
        return convert_scenario(load_scenario(file), weights, target)
    except OSError as error:
        raise OptionError("", cause("option.unwritable", weights=str(weights), target=str(target),
                                    error=error.strerror)) from None


def read_dump(path: Path) -> tuple[Dump, int]:
    """The --against dump and how many tokens it holds generated (its decode rounds)."""
    dump = load_dump(path)
    return dump, dump.new_tokens()
