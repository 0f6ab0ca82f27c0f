"""No generic module names a layer kind: what a kind knows lives in its module (engine/layers/) and is read through
the registry (engine/layers/__init__.py), so that adding a kind is its module and one registry line.

The scan reads the AST of every module of engine/ (but engine/layers/ itself) and of tinyllm_tui/, and finds there:
an import of a kind's module (or of a part one is built from: causal_conv, shared_kv), a string (not a docstring)
that is a kind's NAME, an attribute, keyword or declared field of that name (`model.mla`, `mla=`), a kind's module
read (`moe_ffn.SCORES`), or a class a kind's module defines (`RecurrentFacts`, `DeltaState`). Comments and docstrings
may mention a kind as an example. A loader (engine/loading/) composes an architecture of kinds from a checkpoint's
config: it may build a kind's options (its model-wide engine.spec.KindOptions class and the ModelSpec field holding
them, `spec.moe`; the key of a per-layer one of its LAYER_OPTIONS, `KERNEL`), importing them from the kind's
module, but reads the kinds' tensors, layer types and names through the registry like any generic module.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from engine import layers
from engine.spec import KindOptions, ModelSpec

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ROOT / "engine" / "layers"
LOADING = ROOT / "engine" / "loading"
# Gemma 4's per-layer inputs are no layer kind (the registry holds none): a model-wide input the model assembles
# as it does the embeddings, turned on by ModelSpec.per_layer_input.
NOT_A_KIND = {"__init__", "per_layer_input"}

ALLOWED = {  # (file, word): why it stays
    ("engine/spec.py", "attention"): "LayerSpec's default mixer: a block that names none (every loader's default)",
    ("engine/spec.py", "dense"): "LayerSpec's default FFN, as above",
    ("engine/spec.py", "moe"): "the ModelSpec field holding the MoE kind's model-wide options (its MoeSpec): "
                               "tests and loaders replace it by this name",
    ("engine/spec.py", "mla"): "the ModelSpec field holding latent attention's options (its MlaSpec), as above",
    ("tinyllm_tui/cli.py", "mla"): "the --mla option's declaration: typer reads options from a signature and the "
                                   "CLI imports no engine module; its forms and meaning are the kind's (FORMS, in_form)",
    ("tinyllm_tui/debugger/opening.py", "mla"): "ModelOptions' field that carries --mla, read by the kind's name "
                                                "through engine.layers.forms()",
}


def kind_modules() -> set[str]:
    return {path.stem for path in LAYERS.glob("*.py")} - NOT_A_KIND


def kind_names() -> set[str]:
    return {module.NAME for module in kind_registry()}


def kind_classes() -> set[str]:
    """The classes the kinds' modules define (their states, facts, options, layers, bugs), less the registry's own
    names (FaultPoints: the union of every kind's)."""
    registry = {node.name for node in ast.parse((LAYERS / "__init__.py").read_text()).body
                if isinstance(node, ast.ClassDef)} | {"FaultPoints"}
    return {node.name for name in kind_modules() for node in ast.parse((LAYERS / f"{name}.py").read_text()).body
            if isinstance(node, ast.ClassDef)} - registry


def option_classes() -> set[str]:
    """The kinds' model-wide options classes (MoeSpec, MlaSpec, DeltaNetSpec)."""
    return {name for module in kind_registry() for name, value in vars(module).items() if isinstance(value, type)
            and issubclass(value, KindOptions) and value.__module__ == module.__name__}


def option_keys() -> set[str]:
    """The names, in the kinds' modules and their parts', of their per-layer options' keys (KERNEL)."""
    keys = {key for module in kind_registry() for key in getattr(module, "LAYER_OPTIONS", {})}
    parts = (importlib.import_module(f"engine.layers.{name}") for name in kind_modules())
    return {name for module in parts for name, value in vars(module).items() if isinstance(value, str) and value in keys
            and name.isupper()}


def option_fields() -> set[str]:
    """The ModelSpec fields that hold a kind's options under the kind's name (moe, mla)."""
    return set(ModelSpec.__dataclass_fields__) & kind_names()


def kind_registry():
    return [module for kinds in layers.ROLES.values() for module in kinds.values()]


def generic_modules() -> list[Path]:
    """The modules that compose no kinds (engine/ but layers/ and loading/, and tinyllm_tui/)."""
    engine = [p for p in (ROOT / "engine").rglob("*.py") if not p.is_relative_to(LAYERS) and not is_loader(p)]
    return sorted(engine + list((ROOT / "tinyllm_tui").rglob("*.py")))


def scanned_modules() -> list[Path]:
    """What names no kind: the generic modules and the loaders (which build the kinds' options only)."""
    return sorted(generic_modules() + list(LOADING.rglob("*.py")))


def is_loader(path: Path) -> bool:
    return path.is_relative_to(LOADING)


def _docstrings(tree: ast.AST) -> set[int]:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


def named_kinds(source: str, loader: bool = False) -> list[tuple[int, str]]:
    """(line, word) of each place `source` names a kind (a `loader`: but its options, as the module docstring
    says)."""
    names, modules, classes = kind_names(), kind_modules(), kind_classes()
    options, fields = (option_classes(), option_fields()) if loader else (set(), set())
    classes, importable = classes - options, options | (option_keys() if loader else set())
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        word = None
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("engine.layers."):
            only_options = all(a.name in importable for a in node.names)
            word = node.module.split(".")[2] if node.module.split(".")[2] in modules and not only_options else None
        elif isinstance(node, ast.ImportFrom) and node.module == "engine.layers":
            word = next((a.name for a in node.names if a.name in modules | classes), None)
        elif isinstance(node, ast.Import):
            word = next((a.name.split(".")[2] for a in node.names if a.name.startswith("engine.layers.")
                         and a.name.split(".")[2] in modules), None)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            word = node.value if node.value in names else None
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
            word = node.value.id  # a kind's module read: moe_ffn.SCORES
        elif isinstance(node, ast.Attribute):
            word = node.attr if node.attr in (names - fields) | modules else None
        elif isinstance(node, ast.keyword):
            word = node.arg if node.arg in names - fields else None
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            word = node.target.id if node.target.id in names else None
        elif isinstance(node, ast.Name):
            word = node.id if node.id in classes else None
        if word is not None:
            found.append((node.lineno, word))
    return found


def test_no_generic_module_names_a_layer_kind():
    leaks, allowed = [], set()
    for path in scanned_modules():
        where = path.relative_to(ROOT).as_posix()
        for line, word in named_kinds(path.read_text(encoding="utf-8"), is_loader(path)):
            if (where, word) in ALLOWED:
                allowed.add((where, word))
            else:
                leaks.append(f"{where}:{line}: {word}")
    assert leaks == [], "kind-specific names in generic modules (move them behind engine.layers):\n" + "\n".join(leaks)
    assert allowed == set(ALLOWED), f"allow-list entries nothing needs any more: {set(ALLOWED) - allowed}"


def test_the_scan_sees_each_way_of_naming_a_kind():
    """Each form the scan looks for is found; a docstring, a comment and a local name are not."""
    source = '''"""The moe FFN's and mla's docstring."""
from engine.layers.moe_ffn import route
from engine.layers import gated_deltanet
import engine.layers.short_conv
from engine.layers import route_hooks  # a registry function: fine

def f(model, block, state):
    """mla"""
    attention = 1  # a local name; "mla" in a comment
    return (block.mixer == "gated_deltanet", model.mla, dict(mla=1), isinstance(state.facts, RecurrentFacts),
            moe_ffn.SCORES)

class Options:
    moe: int = 0
'''
    assert sorted(named_kinds(source)) == [(2, "moe_ffn"), (3, "gated_deltanet"), (4, "short_conv"),
                                           (10, "RecurrentFacts"), (10, "gated_deltanet"), (10, "mla"), (10, "mla"),
                                           (11, "moe_ffn"), (14, "moe")]


def test_a_kind_registered_later_is_scanned_for_too(monkeypatch):
    import toy_kind

    monkeypatch.setitem(layers.MIXERS, toy_kind.NAME, toy_kind)
    assert named_kinds('def f(block):\n    return block.mixer == "mean"\n') == [(2, "mean")]


def test_a_loader_may_build_a_kinds_options_but_names_nothing_else_of_it():
    source = '''from engine.layers.moe_ffn import MoeSpec
from engine.layers.moe_ffn import MoeSpec, SCORES
from engine.layers.causal_conv import KERNEL
spec = replace(spec, moe=MoeSpec(2, 1)) if spec.moe is None else spec
block = LayerSpec(mixer="short_conv")
tables = moe_ffn.GGUF
'''
    assert sorted(named_kinds(source, loader=True)) == [(2, "moe_ffn"), (5, "short_conv"), (6, "moe_ffn")]
    assert sorted(named_kinds(source)) == [(1, "moe_ffn"), (2, "moe_ffn"), (3, "causal_conv"), (4, "MoeSpec"),
                                           (4, "moe"), (4, "moe"), (5, "short_conv"), (6, "moe_ffn")]
