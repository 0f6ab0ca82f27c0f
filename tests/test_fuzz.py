"""Fuzzing the loaders: any mutation of a valid input either loads or raises ScenarioError.

Scenarios (every shipped one) are parsed, mutated as a tree (keys deleted or duplicated,
values replaced by other types, lists resized, random scalars) and dumped back with PyYAML;
safetensors files get mutated JSON headers and length prefixes; the tiny Hugging Face
fixtures get mutated config.json values. CI runs a fixed seeded sample (every scenario with every kind of
edit); `-m fuzz_long` (with FUZZ_EXAMPLES=20000) runs many more by hand.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import ROOT, SCENARIOS
from said import said
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import ScenarioError, Session, load_scenario_text
from engine.compare.check import check_scenario
from engine.loading.checkpoint import load_checkpoint
from engine.loading.weightfile import read_weights

BUDGET = 64 << 20  # no mutated model may claim more than this much memory
SCENARIO_TREES = {path.name: yaml.load(path.read_text(encoding="utf-8"), Loader=yaml.CSafeLoader)
                  for path in sorted(SCENARIOS.glob("*.yaml"))}
FIXTURES = ROOT / "tests" / "fixtures"
LONG = int(os.environ.get("FUZZ_EXAMPLES", "0"))  # set it to run the fuzz_long tests


def _examples(ci: int) -> settings:
    return settings(max_examples=ci, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))


def _long(test):
    test = pytest.mark.skipif(not LONG, reason="by hand: FUZZ_EXAMPLES=20000 pytest -m fuzz_long")(test)
    return pytest.mark.fuzz_long(settings(max_examples=max(LONG, 1), deadline=None, database=None,
                                          suppress_health_check=list(HealthCheck))(test))


# -- tree mutations -----------------------------------------------------------------------
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 10), st.integers(-2**70, 2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(["", "PAD", "identity", "zeros", "我", "1e400",
                                                                     ".nan", "-inf", "layernorm", "file"]),
    st.text(max_size=8),
)


def _containers(tree, path=()):
    """Every (path, value) of the tree, depth first, the root included."""
    yield path, tree
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield from _containers(value, (*path, key))
    elif isinstance(tree, list):
        for i, value in enumerate(tree):
            yield from _containers(value, (*path, i))


def _is_cell(path, tree) -> bool:
    """A number inside a matrix row: most of a document, so edits there are drawn far less often."""
    return len(path) >= 2 and isinstance(path[-1], int) and isinstance(path[-2], int)


def _at(tree, path):
    for part in path:
        tree = tree[part]
    return tree


TREE_EDITS = ["replace", "delete", "duplicate", "resize", "add_key", "wrap"]


def _applies(action: str, tree, path, value) -> bool:
    """Whether `action` changes anything at `path` (the branches of `mutated`)."""
    if action == "resize":
        return isinstance(value, list)
    if action == "add_key":
        return isinstance(value, dict)
    if action == "duplicate":
        return bool(path) and isinstance(_at(tree, path[:-1]), list)
    return bool(path)


@st.composite
def mutated(draw, tree, first: str | None = None):
    """A deep copy of `tree` with one to three random edits; with `first`, the first edit is that one, made
    where it applies."""
    tree = json.loads(json.dumps(tree, ensure_ascii=False, allow_nan=True))
    for n in range(draw(st.integers(1, 3))):
        places = list(_containers(tree))
        if draw(st.integers(0, 9)) != 7:  # (hypothesis draws 0 far more often than 1 in 10)
            places = [(p, v) for p, v in places if not _is_cell(p, tree)]
        action = first if n == 0 and first else draw(st.sampled_from(TREE_EDITS))
        if n == 0 and first:
            places = [(p, v) for p, v in places if _applies(first, tree, p, v)] or places
        path, value = draw(st.sampled_from(places))
        parent = _at(tree, path[:-1]) if path else None
        if action == "replace" and path:
            parent[path[-1]] = draw(SCALARS | st.just([]) | st.just({}) | st.lists(SCALARS, max_size=3))
        elif action == "delete" and path:
            del parent[path[-1]]
        elif action == "duplicate" and path and isinstance(parent, list):
            parent.insert(path[-1], json.loads(json.dumps(value, allow_nan=True)))
        elif action == "resize" and isinstance(value, list):
            size = draw(st.integers(0, len(value) + 2))
            value[:] = (value * 3)[:size] if value else [draw(SCALARS) for _ in range(size)]
        elif action == "add_key" and isinstance(value, dict):
            key = draw(st.sampled_from(["file", "scale", "kind", "tokens", "extra", "rows", "head", "round"]))
            value[key] = draw(SCALARS)
        elif action == "wrap" and path:
            parent[path[-1]] = [value]
    return tree


def _dump(tree) -> str:
    return yaml.dump(tree, Dumper=yaml.CSafeDumper, allow_unicode=True, sort_keys=False)


def _load_or_refuse(text: str, run: bool = False) -> None:
    """Loads or raises ScenarioError; with `run`, what loads also runs to its end (and checks its tables)."""
    try:
        scenario = load_scenario_text(text, "fuzz.yaml", max_memory=BUDGET)
    except ScenarioError as error:
        assert said(error).startswith("fuzz.yaml"), error
        assert "\n" not in said(error), error
        return
    if run:
        for _ in Session(scenario).steps():
            pass
        if scenario.expect:
            check_scenario(scenario)


@st.composite
def mutated_scenario(draw):
    name = draw(st.sampled_from(sorted(SCENARIO_TREES)))
    return _dump(draw(mutated(SCENARIO_TREES[name])))


RAW_TOKENS = st.sampled_from([
    "0x_", "+_", "0b2", "0o", "1_000", "9" * 5000, "1e400", "-.inf", ".NaN", "~", "null", "0x1F", "017", "-0",
    "2001-12-14", "!!binary AAAA", "!!python/object:os.system {}", "!!set {a}", "&a", "*a", "*nowhere", "<<: *a",
    "? x", "|", ">-", "'", "\"", "%YAML 1.1", "---", "...", "\t", "\x00", "\ufeff", "𝑥", "a" * 300,
])


TEXT_EDITS = ["drop", "double", "cut", "char", "token"]


@st.composite
def mutated_text(draw, name: str | None = None, action: str | None = None):
    """Text-level edits: a line dropped, doubled or cut, a character replaced (`name`, `action`: drawn
    when not given)."""
    text = (SCENARIOS / (name or draw(st.sampled_from(sorted(SCENARIO_TREES))))).read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    i = draw(st.integers(0, len(lines) - 1))
    action = action or draw(st.sampled_from(TEXT_EDITS))
    if action == "token":  # a plain scalar or YAML construct the tree mutations cannot write
        words = list(re.finditer(r"[^\s,\[\]{}]+", lines[i])) or [re.match("", lines[i])]
        word = draw(st.sampled_from(words))
        lines[i] = lines[i][: word.start()] + draw(RAW_TOKENS) + lines[i][word.end():]
    elif action == "drop":
        del lines[i]
    elif action == "double":
        lines.insert(i, lines[i])
    elif action == "cut":
        lines[i] = lines[i][: draw(st.integers(0, len(lines[i])))]
    else:
        j = draw(st.integers(0, max(0, len(lines[i]) - 1)))
        lines[i] = lines[i][:j] + draw(st.sampled_from(list("[]{}:,-&*!|>'\"#%@` \t0.eE"))) + lines[i][j + 1:]
    return "".join(lines)


# CI's sample: every shipped scenario with every kind of edit, a few seeded examples each (the tree edits'
# first edit is that kind, where it applies); the many-example runs are the fuzz_long tests, by hand.
@pytest.mark.parametrize("edit", TREE_EDITS)
@pytest.mark.parametrize("name", sorted(SCENARIO_TREES))
@_examples(16)
@given(data=st.data())
def test_mutated_scenario_loads_or_is_refused(name, edit, data):
    _load_or_refuse(_dump(data.draw(mutated(SCENARIO_TREES[name], first=edit))))


@pytest.mark.parametrize("edit", TEXT_EDITS)
@pytest.mark.parametrize("name", sorted(SCENARIO_TREES))
@_examples(6)
@given(data=st.data())
def test_mutated_scenario_text_loads_or_is_refused(name, edit, data):
    _load_or_refuse(data.draw(mutated_text(name, edit)), run=True)


@_long
@given(mutated_scenario() | mutated_text())
def test_mutated_scenario_long(text):
    _load_or_refuse(text, run=True)


# -- safetensors headers --------------------------------------------------------------------
SHAPES = {"embed": (3, 2), "blocks.0.attn.wq": (2, 2)}


ITEMSIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I32": 4, "I64": 8, "U8": 1, "BOOL": 1}
SHAPE_CHOICES = [[3, 2], [2, 3], [6], [2, 2], [1, 6], [3, 4], [2, 6], [4, 2], [2, 2, 1], [], [0, 2], [2**20, 2**20]]


@st.composite
def mutated_safetensors(draw) -> bytes:
    """A header the format itself may accept (dtypes, shapes and offsets that agree), with
    some tensors renamed, dropped or added; now and then a corrupt offset, length or body."""
    header, offset = {}, 0
    names = [*SHAPES, *draw(st.lists(st.sampled_from(["extra", "blocks.1.attn.wq", "embed.w"]), max_size=1))]
    for name in names:
        if draw(st.integers(0, 9)) == 7:
            continue  # a tensor missing
        dtype = draw(st.sampled_from(["F32"] * 6 + list(ITEMSIZE)))
        shape = list(SHAPES.get(name, (2, 2))) if draw(st.booleans()) else draw(st.sampled_from(SHAPE_CHOICES))
        size = int(np.prod(shape, dtype=object)) * ITEMSIZE[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    if offset > 1 << 16:
        offset = 0  # a claimed size no file here holds: the body stays small, the header lies
    if header and draw(st.integers(0, 3)) == 2:
        entry = header[draw(st.sampled_from(sorted(header)))]
        entry[draw(st.sampled_from(["dtype", "shape", "data_offsets"]))] = draw(st.one_of(
            SCALARS, st.lists(st.integers(-1, 2**40), max_size=3)))
    if draw(st.integers(0, 4)) == 3:
        header["__metadata__"] = draw(st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2) | SCALARS)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    claimed = draw(st.sampled_from([len(text)] * 8 + [len(text) + 1, 0, 2**40, 2**63, len(text) - 1]))
    body = bytes(np.arange(offset, dtype=np.uint8)) if offset else b""
    if draw(st.integers(0, 5)) == 4:
        body = body[: draw(st.integers(0, len(body)))]
    return struct.pack("<Q", claimed % 2**64) + text + body


def _read_or_refuse(folder: Path, data: bytes) -> None:
    path = folder / "w.safetensors"
    path.write_bytes(data)
    try:
        source = read_weights(path, SHAPES)
    except ScenarioError as error:
        assert said(error).startswith(str(path)), error
        return
    for name, shape in SHAPES.items():  # accepted: every array is there, of its shape
        assert source.arrays[name].shape == shape


@_examples(800)
@given(mutated_safetensors())
def test_mutated_safetensors_header_reads_or_is_refused(tmp_path, data):
    _read_or_refuse(tmp_path, data)


@_long
@given(mutated_safetensors())
def test_mutated_safetensors_long(tmp_path, data):
    _read_or_refuse(tmp_path, data)


# -- config.json ----------------------------------------------------------------------------
CONFIGS = {name: json.loads((FIXTURES / name / "config.json").read_text()) for name in ("llama", "qwen2", "gpt2", "bert")}
CONFIG_VALUES = st.one_of(SCALARS, st.sampled_from([0, 1, 3, 10**9, -4, 2.5, "silu", "llama", {}, [], [1, 2]]))


@st.composite
def mutated_config(draw):
    name = draw(st.sampled_from(sorted(CONFIGS)))
    config = dict(CONFIGS[name])
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from(sorted(config)))
        if draw(st.integers(0, 4)) == 0:
            del config[key]
        else:
            config[key] = draw(CONFIG_VALUES)
    return name, config


def _open_or_refuse(folder: Path, name: str, config: dict) -> None:
    target = folder / name
    if not target.exists():
        shutil.copytree(FIXTURES / name, target)
    (target / "config.json").write_text(json.dumps(config))
    try:
        load_checkpoint(target, ids=[1, 2], max_memory=BUDGET)
    except ScenarioError as error:
        assert said(error).startswith(str(target)), error
        assert "\n" not in said(error), error
        assert "internal error" not in said(error), error  # the last resort, for a check the loader lacks


@_examples(400)
@given(mutated_config())
def test_mutated_config_opens_or_is_refused(tmp_path, case):
    _open_or_refuse(tmp_path, *case)


@_long
@given(mutated_config())
def test_mutated_config_long(tmp_path, case):
    _open_or_refuse(tmp_path, *case)


# -- checkpoints, through the command line (tests/fuzz_loaders.py) -------------------------------
def test_a_short_run_of_the_loader_fuzzer_finds_nothing():
    """40 mutants of GGUF files, safetensors headers and Hugging Face folders, each opened by `run` in a
    worker held to 1.5 GiB and a time limit; the full run (2 000 and more) is by hand."""
    import fuzz_loaders

    failures = fuzz_loaders.run(40, seed=27, report=lambda line: None)
    assert not failures, [(case.index, case.edits, said) for case, said, _ in failures]
