"""Served mode: the debugger run for one learner in a browser by `tinyllm-tui serve`.

The server starts each learner's app in a fresh folder that holds a copy of the scenario (the working
directory, so every path the app shows is a bare name in it) with TINYLLM_SERVED=1 in its environment.
In this mode nothing is written outside that folder: save-as takes a bare file name, and each file a save
writes is offered to the learner as a browser download (Textual's deliver_binary, served by textual-serve).
"""

from __future__ import annotations

import io
import os
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

ENVIRONMENT = "TINYLLM_SERVED"
# Letters, digits, '.', '_', '-': no folder, no '..', no '~', no hidden file, and a safe download name.
BARE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}")


@dataclass(frozen=True)
class Served:
    """The app's served-mode settings (the folder is the working directory: nothing to hold yet)."""

    @classmethod
    def from_environment(cls) -> Served | None:
        return cls() if os.environ.get(ENVIRONMENT) == "1" else None

    @staticmethod
    def save_as_target(text: str) -> Path | None:
        """Where save-as writes `text`: the bare file name, relative to the folder; None for anything else."""
        return Path(text) if BARE_NAME.fullmatch(text) and text not in (".", "..") else None

    def deliver(self, app, paths: list[Path]) -> None:
        """Offer the files a save wrote as one download: the file itself, or a zip of several (a YAML and
        the weight file it names), since a browser lets a page open one download per keypress."""
        paths = list(dict.fromkeys(Path(p) for p in paths))
        if len(paths) == 1:
            app.deliver_binary(paths[0], save_filename=paths[0].name)
            return
        archive = io.BytesIO()
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zipped:
            for path in paths:
                zipped.write(path, path.name)
        archive.seek(0)
        app.deliver_binary(archive, save_filename=f"{paths[0].stem}.zip", mime_type="application/zip")
