"""Unsaved weight edits kept beside the scenario, so that a crash or a kill loses none.

The file (`.NAME.unsaved-edits.json` next to the scenario) holds the list of edits,
not the weights, with the identity of the weights they apply to; it is replaced
atomically after every edit and removed once the edits are saved or dropped on purpose.
`TINYLLM_AUTOSAVE_DIR` puts these files in one folder instead (the tests use it, so that
editing the bundled scenarios leaves nothing beside them).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from engine.loading.edits import Edit, EditError, Weights, edit_from_record, edit_record
from engine.loading.weightfile import atomic_write


@dataclass(frozen=True)
class Unsaved:
    edits: list[Edit]
    written: str  # when, as local time text


def autosave_path(scenario_path: str | Path) -> Path:
    path = Path(scenario_path)
    folder = os.environ.get("TINYLLM_AUTOSAVE_DIR")
    if folder:  # one folder for every scenario: the name carries which one
        digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
        return Path(folder) / f".{path.name}.{digest}.unsaved-edits.json"
    return path.with_name(f".{path.name}.unsaved-edits.json")


def keep(scenario_path: str | Path, fingerprint: str, edits: list[Edit]) -> None:
    """Write the edits (or remove the file when there are none); a folder that cannot be written
    loses only this safety net, never the edits in memory."""
    target = autosave_path(scenario_path)
    try:
        if not edits:
            target.unlink(missing_ok=True)
            return
        text = json.dumps({"weights": fingerprint, "written": time.strftime("%Y-%m-%d %H:%M:%S"),
                           "edits": [edit_record(edit) for edit in edits]})
        atomic_write(target, lambda temporary: temporary.write_text(text, encoding="utf-8"))
    except OSError:
        pass


def find(scenario_path: str | Path, fingerprint: str, weights: Weights) -> Unsaved | None:
    """The edits an earlier session left for these very weights, if any can be read and applied."""
    try:
        record = json.loads(autosave_path(scenario_path).read_text(encoding="utf-8"))
        if record["weights"] != fingerprint:
            return None  # the file changed since: the edits belonged to other weights
        return Unsaved([edit_from_record(edit, weights) for edit in record["edits"]], str(record["written"]))
    except (OSError, ValueError, KeyError, TypeError, EditError):
        return None


def drop(scenario_path: str | Path) -> None:
    autosave_path(scenario_path).unlink(missing_ok=True)
