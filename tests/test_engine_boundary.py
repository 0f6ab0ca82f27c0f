"""The engine is importable, and usable, without the UI stack."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import ROOT, X01

UI_PACKAGES = ("textual", "rich", "typer")


def test_engine_never_imports_the_ui():
    modules = sorted(f"engine.{p.stem}" for p in (ROOT / "engine").glob("*.py") if p.stem != "__init__")
    code = (
        "import sys\n"
        f"import {', '.join(modules)}\n"
        "from engine import Session, load_scenario\n"
        f"list(Session(load_scenario({str(X01)!r})).steps())\n"
        f"loaded = [m for m in {UI_PACKAGES!r} if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr


def test_no_engine_source_names_a_ui_package():
    for path in Path(ROOT / "engine").glob("*.py"):
        for line in path.read_text(encoding="utf-8").splitlines():
            words = line.split()
            if words[:1] in (["import"], ["from"]):
                assert words[1].split(".")[0] not in UI_PACKAGES, f"{path.name}: {line}"
