"""Opening a scenario file in the TUI loads none of the checkpoint readers' libraries, none of those only a weight
file, a tokenizer or a save needs, nor array_api_compat's copy of NumPy, which imports numpy.f2py, testing, ma
and random (issue 24's start goal)."""

import subprocess
import sys
from pathlib import Path

X01 = Path(__file__).resolve().parents[1] / "scenarios" / "x01.yaml"
CHECKPOINT_ONLY = ("gguf", "jinja2", "ml_dtypes", "engine.loading.checkpoint", "engine.loading.hf")
NOT_AT_START = (*CHECKPOINT_ONLY, "tokenizers", "safetensors", "ruamel.yaml", "array_api_compat.numpy", "numpy.f2py",
                "numpy.testing")


def test_a_scenario_file_opens_without_the_libraries_it_does_not_use():
    script = (f"import sys\nfrom tinyllm_tui import cli\nfrom tinyllm_tui.tui import app\n"
              f"from engine import load_scenario, make_backend\nload_scenario({str(X01)!r})\nmake_backend('numpy')\n"
              f"print(' '.join(name for name in {NOT_AT_START!r} if name in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    assert loaded == []
