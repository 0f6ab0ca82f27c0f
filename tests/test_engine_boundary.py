"""The layers' boundaries, read from the source's syntax trees: every import, at module level or inside a
function, and every name a module takes from another module of the project (so that a type re-exported
through a debugger module to a view counts as the import it is).

- the engine imports no UI package and nothing from tinyllm_tui;
- the engine's numerics and its layer kinds (engine/*.py, engine/layers/) import nothing from engine/loading or
  engine/compare;
- no front end (tinyllm_tui/tui/, tinyllm_tui/serve/, cli.py) imports engine, directly, through a re-export, or by
  reading an attribute of a debugger module;
- nothing under tinyllm_tui/debugger/ imports tinyllm_tui.tui, directly or through the modules it imports (the
  presentation's wording reads the views' catalogue): the headless Debugger loads no view;
- no import circle anywhere.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from functools import cache
from pathlib import Path

from conftest import ROOT, X01

UI_PACKAGES = frozenset({"textual", "rich", "typer"})
PACKAGES = ("engine", "tinyllm_tui")


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


@cache
def sources() -> dict[str, Path]:
    """Every module of the project, by dotted name."""
    return {module_name(path): path for package in PACKAGES for path in (ROOT / package).rglob("*.py")}


def absolute(module: str, node: ast.ImportFrom) -> str:
    """The module a `from … import` names, its relative dots resolved against `module`."""
    if not node.level:
        return node.module
    package = module if sources()[module].name == "__init__.py" else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


@cache
def imports(module: str) -> tuple[tuple[str, str | None, str | None], ...]:
    """(module imported, name taken from it, name it is bound to here) for every import statement anywhere in
    `module` (the names None for a whole module); a `from package import submodule` names the submodule, and each
    attribute read of such a module (`frame.RingFacts`) takes that name from it; `importlib.import_module("x")` and
    `__import__("x")` of a literal import x."""
    found, aliases = [], {}
    tree = ast.parse(sources()[module].read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, None, None) for alias in node.names]
            aliases.update({alias.asname: alias.name for alias in node.names if alias.asname})
        elif isinstance(node, ast.ImportFrom):
            source = absolute(module, node)
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                if submodule in sources():
                    found.append((submodule, None, None))
                    aliases[alias.asname or alias.name] = submodule
                else:
                    found.append((source, alias.name, alias.asname or alias.name))
        elif isinstance(node, ast.Call) and dynamic_import(node):
            found.append((node.args[0].value, None, None))
    found += [(aliases[node.value.id], node.attr, None) for node in ast.walk(tree)
              if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
              and f"{aliases[node.value.id]}.{node.attr}" not in sources()]
    return tuple(found)


def dynamic_import(call: ast.Call) -> bool:
    """`importlib.import_module("x")` or `__import__("x")` with a literal name."""
    named = (isinstance(call.func, ast.Attribute) and call.func.attr == "import_module"
             or isinstance(call.func, ast.Name) and call.func.id == "__import__")
    return named and bool(call.args) and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str)


def origin(module: str, name: str, seen: frozenset = frozenset()) -> str:
    """The module that defines what `module` offers as `name`, following re-exports (and renames) through the
    project."""
    for source, taken, bound in imports(module):
        if bound == name and source in sources() and (source, taken) not in seen:
            return origin(source, taken, seen | {(source, taken)})
        if bound == name:
            return source
    return module


def reaches(module: str) -> set[str]:
    """Every module `module` takes something from, a re-exported name counted at the module that defines it."""
    return {origin(source, taken) if taken is not None and source in sources() else source
            for source, taken, _ in imports(module)}


def top(module: str) -> str:
    return module.split(".")[0]


def is_engine(module: str) -> bool:
    return top(module) == "engine"


def is_numerics(module: str) -> bool:
    """A module of the engine's numerics: engine/*.py and its layer kinds (engine/layers/), not the package's face
    (engine/__init__.py, which offers the loaders too) nor loading/ and compare/ themselves."""
    parts = module.split(".")
    return parts[0] == "engine" and len(parts) > 1 and parts[1] not in ("loading", "compare")


def is_front_end(module: str) -> bool:
    """What a person drives: the views, the command line, the classroom server."""
    return module.startswith(("tinyllm_tui.tui", "tinyllm_tui.serve")) or module == "tinyllm_tui.cli"


def violations() -> list[str]:
    found = []
    for module in sources():
        for target in sorted(reaches(module)):
            if is_engine(module) and (top(target) in UI_PACKAGES or top(target) == "tinyllm_tui"):
                found.append(f"{module} imports {target}: the engine imports no UI")
            if is_numerics(module) and target.startswith(("engine.loading", "engine.compare")):
                found.append(f"{module} imports {target}: the numerics reach up into loading/compare")
            if is_front_end(module) and is_engine(target):
                found.append(f"{module} imports {target}: a view drives the Debugger, never the engine")
        if module.startswith("tinyllm_tui.debugger"):
            found += [f"{module} loads {target}: the Debugger is headless, the views hand it their words"
                      for target in sorted(loads(module)) if target.startswith("tinyllm_tui.tui")]
    return found


def loads(module: str) -> set[str]:
    """Every module of the project that importing `module` loads, through the modules it imports (a name taken
    from a module loads that module, wherever the name is defined)."""
    found, todo = set(), [module]
    while todo:
        for target, _, _ in imports(todo.pop()):
            if target in sources() and target not in found:
                found.add(target)
                todo.append(target)
    return found


def graph() -> dict[str, set[str]]:
    """Module -> the project's modules it imports (names taken count at the module that holds them)."""
    return {module: {target for target in reaches(module) if target in sources() and target != module}
            for module in sources()}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(edges)))
    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_no_layer_reaches_past_its_boundary():
    assert violations() == []


def test_no_import_circle():
    assert circles(graph()) == []


def test_the_walk_sees_imports_in_functions_and_through_re_exports(tmp_path, monkeypatch):
    """The checker itself: a function-level import, a relative import and a re-exported engine name are seen."""
    fake = {"tinyllm_tui.tui.view": "def f():\n    from tinyllm_tui.debugger.shim import Thing\n",
            "tinyllm_tui.debugger.shim": "from engine.trace import Thing\nfrom engine.trace import __doc__ as TEXT\n",
            "tinyllm_tui.tui.other": "from tinyllm_tui.debugger.shim import TEXT\n",
            "tinyllm_tui.debugger.frames": "from tinyllm_tui.presentation.words import WORDS\n",
            "tinyllm_tui.presentation.words": "from tinyllm_tui.tui.other import TEXT as WORDS\n",
            "tinyllm_tui.debugger": "from .shim import Thing\n",
            "tinyllm_tui.tui.alias": "from tinyllm_tui.debugger import shim\n\ndef f():\n    return shim.Thing\n",
            "tinyllm_tui.serve.dynamic": "import importlib\n\nLOADED = importlib.import_module('engine.trace')\n",
            "engine.layers.kind": "from engine.loading.reader import read\n",
            "engine.loading.reader": "def read(): ...\n",
            "engine.trace": "class Thing: ...\n"}
    paths = {}
    for name, text in fake.items():
        path = tmp_path / Path(*name.split(".")) / "__init__.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        paths[name] = path
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    sources.cache_clear(), imports.cache_clear()
    monkeypatch.setattr(sys.modules[__name__], "sources", lambda: paths)
    try:
        assert reaches("tinyllm_tui.tui.view") == {"engine.trace"}
        assert reaches("tinyllm_tui.debugger") == {"engine.trace"}
        assert reaches("tinyllm_tui.tui.other") == {"engine.trace"}  # renamed on its way
        assert reaches("tinyllm_tui.tui.alias") == {"tinyllm_tui.debugger.shim", "engine.trace"}  # an attribute
        assert reaches("tinyllm_tui.serve.dynamic") == {"importlib", "engine.trace"}
        assert "engine.layers.kind imports engine.loading.reader: the numerics reach up into loading/compare" in \
            violations()
        assert any("tinyllm_tui.tui.view imports engine.trace" in v for v in violations())
        assert loads("tinyllm_tui.tui.view") == {"tinyllm_tui.debugger.shim", "engine.trace"}
        assert [v for v in violations() if v.startswith("tinyllm_tui.debugger")] == [  # through the presentation
            "tinyllm_tui.debugger.frames loads tinyllm_tui.tui.other: the Debugger is headless, the views hand it "
            "their words"]
        assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    finally:
        imports.cache_clear()


def test_engine_and_debugger_never_load_the_ui():
    """At run time too: a continue on X01 loads none of the UI packages, nor the views (tinyllm_tui.tui)."""
    headless = sorted(m for m in sources() if m.startswith(("engine", "tinyllm_tui.debugger")))
    code = (
        "import sys\n"
        f"import {', '.join(headless)}\n"
        "from tinyllm_tui.debugger.opening import ModelOptions, load\n"
        "from tinyllm_tui.debugger import Debugger\n"
        f"debugger = Debugger(load({str(X01)!r}, ModelOptions()))\n"
        "debugger.continue_()\n"
        f"loaded = [m for m in {sorted(UI_PACKAGES | {'tinyllm_tui.tui'})!r} if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
