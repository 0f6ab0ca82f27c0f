from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SEEDS = ROOT.parent / "shared" / "seeds"
SCENARIOS = ROOT / "scenarios"
X01 = SCENARIOS / "x01.yaml"

os.environ["TEXTUAL_ANIMATIONS"] = "none"  # snapshots must not catch a transition half-way
sys.path.insert(0, str(ROOT / "tests" / "data"))  # the seed-table extractor


@pytest.fixture(params=["numpy", "array_api_strict"])
def backend(request):
    """Every engine test that takes this fixture runs on NumPy and on array_api_strict."""
    from engine import make_backend

    return make_backend(request.param)
