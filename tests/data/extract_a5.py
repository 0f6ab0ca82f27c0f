"""Extract the 2-D hand-computed attention example (A.5) from the 003 seed text.

    python tests/data/extract_a5.py ../shared/seeds/003_b083148e430164ac.txt > tests/data/a5_hand_example.json
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path


def _numbers(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?", text)]


def extract(text: str) -> dict:
    section = text[text.index("A.5｜") : text.index("A.6｜")]
    query = re.search(r"当前Q = (\[[^\]]*\])", section).group(1)
    keys = re.search(r"历史K = (\[\[.*?\]\])", section).group(1)
    values = re.search(r"历史V = (\[\[.*?\]\])", section).group(1)
    weights = re.search(r"a = (\[[^\]]*\])", section).group(1)
    outputs = re.findall(r"≈(\d+\.\d+)", section)
    return {
        "q": _numbers(query),
        "k": [_numbers(row) for row in re.findall(r"\[[^\[\]]*\]", keys)],
        "v": [_numbers(row) for row in re.findall(r"\[[^\[\]]*\]", values)],
        "weights": _numbers(weights),
        "output": [float(x) for x in outputs],
    }


if __name__ == "__main__":
    json.dump(extract(Path(sys.argv[1]).read_text(encoding="utf-8")), sys.stdout, indent=1)
    sys.stdout.write("\n")
