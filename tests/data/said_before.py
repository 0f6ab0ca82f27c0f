"""Captures what the command line says on bad inputs, as the reference tests/test_loader_words.py holds the
words to: run once on the code from before the loaders' refusals became causes (commit 433e29a), so that the
English the catalogue now gives them is checked against what the loaders themselves wrote.

    PYTHONPATH=/path/to/old/checkout PYTHONDONTWRITEBYTECODE=1 python tests/data/said_before.py

Writes tests/data/said_before.json: for each bad file of tests/data/bad and each refused loader mutant
(tests/loader_mutations.py, seed SEED), the stderr lines of `tinyllm-tui run|check …`, the scratch folder written
as {dir} and the corpus folder as {bad}.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import yaml
from typer.testing import CliRunner

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from loader_mutations import mutant  # noqa: E402

SEED, MUTANTS = 5, 240
BAD = HERE / "bad"


def said(args: list[str]) -> tuple[int, list[str]]:
    from tinyllm_tui.cli import app

    result = CliRunner().invoke(app, args)
    return result.exit_code, result.stderr.splitlines()


def main() -> None:
    expected = yaml.safe_load((BAD / "expected.yaml").read_text(encoding="utf-8"))
    out: dict[str, list[str]] = {}
    for case in sorted(expected):
        _, lines = said([expected[case].get("command", "run"), str(BAD / case)])
        out[f"bad/{case}"] = [line.replace(str(BAD), "{bad}") for line in lines]
    with tempfile.TemporaryDirectory(prefix="said-") as scratch:
        for index in range(MUTANTS):
            case = mutant(SEED, index)
            folder = Path(scratch) / str(index)
            folder.mkdir()
            code, lines = said(["run", str(case.build(folder)), *case.options])
            if code == 2:
                out[f"mutant/{index}"] = [line.replace(str(folder), "{dir}") for line in lines]
    (HERE / "said_before.json").write_text(json.dumps(out, ensure_ascii=False, indent=0, sort_keys=True) + "\n",
                                           encoding="utf-8")


if __name__ == "__main__":
    main()
