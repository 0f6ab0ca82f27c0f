"""The engine and the headless Debugger are importable, and usable, without the UI stack."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import ROOT, X01

UI_PACKAGES = ("textual", "rich", "typer")


HEADLESS = (ROOT / "engine", ROOT / "tinyllm_tui" / "debugger")  # the engine and the debugger core


def headless_modules() -> list[str]:
    """Every module of the engine and of the debugger package, subpackages included."""
    return sorted(".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
                  for folder in HEADLESS for p in folder.rglob("*.py"))


def test_engine_and_debugger_never_import_the_ui():
    code = (
        "import sys\n"
        f"import {', '.join(headless_modules())}\n"
        "from engine import load_scenario\n"
        "from tinyllm_tui.debugger import Debugger\n"
        f"debugger = Debugger(load_scenario({str(X01)!r}))\n"
        "debugger.continue_()\n"
        f"loaded = [m for m in {UI_PACKAGES!r} if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr


def test_no_engine_source_names_a_ui_package():
    for path in (p for folder in HEADLESS for p in folder.rglob("*.py")):
        for line in path.read_text(encoding="utf-8").splitlines():
            words = line.split()
            if words[:1] in (["import"], ["from"]):
                assert words[1].split(".")[0] not in UI_PACKAGES, f"{path.name}: {line}"


def test_no_view_module_imports_the_engine():
    """Widgets and screens render frames: what they need of the engine comes through the Debugger."""
    for path in (ROOT / "tinyllm_tui" / "tui").rglob("*.py"):
        for line in path.read_text(encoding="utf-8").splitlines():
            words = line.split()
            if words[:1] in (["import"], ["from"]):
                assert words[1].split(".")[0] != "engine", f"{path.relative_to(ROOT)}: {line}"
