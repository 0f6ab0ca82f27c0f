"""The loaders' refusals are causes (engine/causes.py: a code and its facts) that the catalogue words: no loader
writes a sentence of its own, the English the CLI prints is what it printed before, and --lang zh words them in
Chinese."""

from __future__ import annotations

import ast
import json
import tempfile
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from conftest import ROOT
from loader_mutations import mutant
from said_before import SEED
from tinyllm_tui.cli import app

DATA = ROOT / "tests" / "data"
BAD = DATA / "bad"
BEFORE = json.loads((DATA / "said_before.json").read_text(encoding="utf-8"))  # tests/data/said_before.py wrote it
LOADERS = [*sorted((ROOT / "engine" / "loading").glob("*.py")),
           *(ROOT / "engine" / "compare" / f"{name}.py" for name in ("dump", "llama_cpp", "expect", "exact"))]
REFUSING = {"ScenarioError", "ConfigError", "TokenizerError", "LayoutError", "Damage", "error", "warn"}  # `node.error(…)` too


def worded_in_place(node: ast.expr) -> bool:
    """A sentence written at the call: a literal, an f-string, or text joined from them."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    return isinstance(node, ast.BinOp) and (worded_in_place(node.left) or worded_in_place(node.right))


def sentences(path: Path) -> list[str]:
    """`file:line` of each refusal in `path` whose message (its last argument: ScenarioError(file, line, path,
    message), ConfigError(file, key, message), node.error(message), warn(file, path, message), …) is a sentence
    rather than a cause."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and node.args:
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in REFUSING and worded_in_place(node.args[-1]):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_the_sentence_finder_finds_sentences():
    said = ast.parse('raise node.error(f"got {x}")\nraise ScenarioError(f, None, "", "no " + x)\n'
                     'raise node.error(cause("doc.tag", tag=t))\nraise ConfigError(f, "key", why)')
    calls = [n for n in ast.walk(said) if isinstance(n, ast.Call) and n.args and
             getattr(n.func, "attr", getattr(n.func, "id", "")) in REFUSING]
    assert [worded_in_place(call.args[-1]) for call in calls] == [True, True, False, False]


PENDING = {"scenario_file.py"}  # _layers, _kernel, _layer_theta: helper C rewrites them


@pytest.mark.parametrize("path", LOADERS, ids=[path.name for path in LOADERS])
def test_no_loader_words_a_refusal_itself(path):
    assert (sentences(path) != []) == (path.name in PENDING)  # a file done leaves PENDING


def said(args: list[str]) -> list[str]:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    return result.stderr.splitlines()


BAD_CASES = sorted(key.removeprefix("bad/") for key in BEFORE if key.startswith("bad/"))
MUTANTS = sorted(int(key.removeprefix("mutant/")) for key in BEFORE if key.startswith("mutant/"))


@pytest.mark.parametrize("case", BAD_CASES)
def test_a_bad_file_is_refused_in_the_words_it_was_before(case):
    command = yaml.safe_load((BAD / "expected.yaml").read_text(encoding="utf-8"))[case].get("command", "run")
    assert [line.replace(str(BAD), "{bad}") for line in said([command, str(BAD / case)])] == BEFORE[f"bad/{case}"]


def test_a_refused_checkpoint_mutant_is_refused_in_the_words_it_was_before(tmp_path):
    """The mutants of tests/loader_mutations.py (seed SEED) the loaders refused before: GGUF metadata and tensor
    tables, safetensors headers, config.json and tokenizer.json values, each line as it was."""
    assert len(MUTANTS) > 150
    for index in MUTANTS:
        case, folder = mutant(SEED, index), tmp_path / str(index)
        folder.mkdir()
        lines = said(["run", str(case.build(folder)), *case.options])
        assert [line.replace(str(folder), "{dir}") for line in lines] == BEFORE[f"mutant/{index}"], (index, case.edits)
