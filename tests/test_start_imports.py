"""Opening a scenario file in the TUI loads none of the checkpoint readers' libraries (issue 24's start goal)."""

import subprocess
import sys
from pathlib import Path

X01 = Path(__file__).resolve().parents[1] / "scenarios" / "x01.yaml"
CHECKPOINT_ONLY = ("gguf", "jinja2", "ml_dtypes", "engine.loading.checkpoint", "engine.loading.hf")


def test_a_scenario_file_opens_without_the_checkpoint_libraries():
    script = (f"import sys\nfrom tinyllm_tui import cli\nfrom tinyllm_tui.tui import app\n"
              f"from engine import load_scenario\nload_scenario({str(X01)!r})\n"
              f"print(' '.join(name for name in {CHECKPOINT_ONLY!r} if name in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    assert loaded == []
