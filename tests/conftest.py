from __future__ import annotations

import shutil
import sys
import tracemalloc
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SEEDS = ROOT.parent / "shared" / "seeds"
SCENARIOS = ROOT / "scenarios"
X01 = SCENARIOS / "x01.yaml"

sys.path.insert(0, str(ROOT / "tests" / "data"))  # the seed-table extractor


@pytest.fixture(params=["numpy", "array_api_strict"])
def backend(request):
    """Every engine test that takes this fixture runs on NumPy and on array_api_strict."""
    from engine import make_backend

    return make_backend(request.param)


@pytest.fixture(autouse=True)
def autosave_folder(tmp_path_factory, monkeypatch):
    """Unsaved edits made by a test are autosaved in a folder of their own, never beside the bundled scenarios."""
    folder = tmp_path_factory.mktemp("autosave")
    monkeypatch.setenv("TINYLLM_AUTOSAVE_DIR", str(folder))
    return folder


@pytest.fixture
def x01_copy(tmp_path) -> Path:
    """X01 copied into the test's folder, to edit and save without touching the bundled file."""
    path = tmp_path / "x01.yaml"
    shutil.copy(X01, path)
    return path


def still(app):
    """No animation (a tab underline caught half-way makes snapshots flaky)."""
    app.animation_level = "none"
    return app


def round_summaries(states, request: int) -> list:
    """The rounds of `request` that `states` have finished (their choice was made), summarised one by one:
    what History.finished_rounds must give."""
    from tinyllm_tui.debugger.history import round_summary

    return [round_summary(s) for s in states if s.request == request and s.kind.name == "CHOICE"]


def peak_bytes(action) -> int:
    """The most memory Python and NumPy held at once while `action()` ran."""
    tracemalloc.start()
    try:
        action()
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak
