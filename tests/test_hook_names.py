"""No generic module builds or cuts a hook name as a string: engine.hooks.Hook renders and parses them, and a layer
kind's module (engine/layers/) names its own hooks with it.

The scan reads the AST of the same modules as tests/test_kind_names.py (engine/ but engine/layers/ and
engine/loading/, whose names are weights' and tensors', and tinyllm_tui/), less engine/hooks.py, and finds there:
- a name built: an f-string or a sum that begins with `blocks.`, or an f-string that joins a value to a literal
  holding `hook_` / `cache_`, or joins a hook (a value whose expression names one) to a dot;
- a name cut: split, rsplit, partition, rpartition, removeprefix, removesuffix, startswith, endswith or replace
  with an argument holding `blocks`, `hook_` or `cache_`, or the head's ` h`, or splitting a hook or a name at a dot;
- a name parsed by a regular expression: a pattern given to `re` that holds `blocks`, `hook_` or `cache_`.
Docstrings may show hook names. Nor does a generic module name one kind's hook (a string that is the name of a hook
the kinds yield and the stack does not, `"hook_attn_scores"`): it asks engine.layers which hooks are masked, per head,
a pattern, a head's result.
"""

from __future__ import annotations

import ast
import functools

from test_kind_names import ROOT, _docstrings, generic_modules

from engine import layers
from engine.loading import open_model
from engine.session import Session

REGEXES = {"compile", "match", "fullmatch", "search", "sub", "subn", "split", "findall", "finditer"}
CUTS = {"split", "rsplit", "partition", "rpartition", "removeprefix", "removesuffix", "startswith", "endswith",
        "replace"}
MARKS = ("blocks", "hook_", "cache_")
ALLOWED = {  # (file, function; None: every function): why it stays
    ("engine/parameters.py", "parameter_shapes"): "weight names (blocks.L.ln1.w), which are no hooks",
    ("engine/parameters.py", "name_parts"): "a weight's name as the keys of the weights document",
    ("engine/model.py", "_norm_hooks"): "the norm's gain's and bias's weight names beside its hooks (made with Hook)",
}


def _words(node: ast.AST) -> str:
    """The identifiers an expression is made of, outermost first (`state.op.hook.module` -> "module hook op state")."""
    return " ".join(n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(node)
                    if isinstance(n, (ast.Name, ast.Attribute)))


def _texts(node: ast.AST) -> list[str]:
    """The literal text of an argument: a string, an f-string's literal parts, a tuple's strings."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    parts = node.values if isinstance(node, ast.JoinedStr) else node.elts if isinstance(node, ast.Tuple) else []
    return [text for part in parts for text in _texts(part)]


def _built(node: ast.JoinedStr) -> bool:
    """An f-string that begins with `blocks.`, joins a value to `hook_…`/`cache_…`, or a hook to a dot."""
    parts = node.values
    literals = [str(part.value) for part in parts if isinstance(part, ast.Constant)]
    if parts and isinstance(parts[0], ast.Constant) and literals[0].startswith("blocks."):
        return True
    if len(literals) < len(parts) and any(mark in text for text in literals for mark in MARKS[1:]):
        return True
    return any(_joins_a_hook(parts, i) for i in range(len(parts)))


def _joins_a_hook(parts: list[ast.AST], i: int) -> bool:
    """Part `i` is a value whose expression names a hook, with a dot right before or after it."""
    if not (isinstance(parts[i], ast.FormattedValue) and "hook" in _words(parts[i].value)):
        return False
    before, after = parts[i - 1] if i else None, parts[i + 1] if i + 1 < len(parts) else None
    return (isinstance(before, ast.Constant) and str(before.value).endswith(".")
            or isinstance(after, ast.Constant) and str(after.value).startswith("."))


def _cut(node: ast.Call) -> bool:
    if not (isinstance(node.func, ast.Attribute) and node.func.attr in CUTS):
        return False
    texts = [text for arg in node.args for text in _texts(arg)]
    if any(mark in text for text in texts for mark in MARKS) or " h" in texts:
        return True
    receiver = _words(node.func.value).split()
    named = bool(receiver) and any(word in receiver[0].lower() for word in ("hook", "name"))  # `key.name`, `hook`
    return named and "." in texts


def _regex(node: ast.Call) -> bool:
    """`re.<function>(pattern, …)` whose pattern holds a part of a hook name (`^blocks\\.(\\d+)\\.`): a name parsed."""
    func = node.func
    if not (isinstance(func, ast.Attribute) and func.attr in REGEXES and isinstance(func.value, ast.Name)
            and func.value.id == "re" and node.args):
        return False
    return any(mark in text for text in _texts(node.args[0]) for mark in MARKS)


def surgery(source: str) -> list[tuple[int, str | None]]:
    """(line, enclosing function) of each place `source` builds or cuts a hook name as a string."""
    tree = ast.parse(source)
    docstrings, found = _docstrings(tree), []

    def visit(node: ast.AST, function: str | None) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name
        called = isinstance(node, ast.Call) and (_cut(node) or _regex(node))
        if isinstance(node, ast.JoinedStr) and _built(node) or called or (
                isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and isinstance(node.left, ast.Constant)
                and str(node.left.value).startswith("blocks.")):
            found.append((node.lineno, function))
        for child in ast.iter_child_nodes(node):
            if id(child) not in docstrings:
                visit(child, function)

    visit(tree, None)
    return found


def test_no_generic_module_builds_or_cuts_a_hook_name_as_a_string():
    leaks, allowed = [], set()
    for path in generic_modules():
        where = path.relative_to(ROOT).as_posix()
        if where == "engine/hooks.py":
            continue
        for line, function in surgery(path.read_text(encoding="utf-8")):
            key = next((k for k in ((where, function), (where, None)) if k in ALLOWED), None)
            if key is None:
                leaks.append(f"{where}:{line} ({function})")
            else:
                allowed.add(key)
    assert leaks == [], ("hook names built or cut as strings (use engine.hooks.Hook's render/parse, or its fields):\n"
                         + "\n".join(leaks))
    assert allowed == set(ALLOWED), f"allow-list entries nothing needs any more: {set(ALLOWED) - allowed}"


def test_the_scan_sees_each_way_of_building_or_cutting_a_hook_name():
    """Each form the scan looks for is found; a docstring, a pass name's split and a message are not."""
    source = '''"""blocks.0.attn.hook_q is split("."): a docstring."""
def f(layer, hook, name, key, state, pass_, word):
    """f"blocks.{layer}" in a docstring"""
    a = f"blocks.{layer}.attn.hook_z"
    b = "blocks." + str(layer)
    c = f"{key}.hook_scale"
    d = f"{state.op.hook.module}.{name}"
    e = name.rsplit(".", 1)[-1]
    g = hook.removeprefix("blocks.").partition(".hook_resid_")
    h = state.short.split(" h")[0]
    i = key.endswith(("x", "_norm.hook_normalized"))
    j = key.name.partition(".")
    k = re.compile(r"^blocks\\.(\\d+)\\.").match(name), re.fullmatch(r"(.+)\\.hook_(\\w+)", name)
    ok = (pass_.split(".")[1], word.split(","), f"{pass_}.{key}", f"layer {layer}", name.startswith("__"), f"",
          state.name_of.x.split("."), re.compile(r"^\\s*(\\d+)\\s*$"), re.split(r"\\.", word), word.sub("blocks"))
    return a, b, c, d, e, g, h, i, j, k, ok
'''
    assert surgery(source) == [(4, "f"), (5, "f"), (6, "f"), (7, "f"), (8, "f"), (9, "f"), (9, "f"), (10, "f"),
                               (11, "f"), (12, "f"), (13, "f"), (13, "f")]


# -- a kind's hook names, as literals ----------------------------------------------------------------------------------
LITERALS_ALLOWED = {  # (file, literal; None: every literal): why it stays
    ("engine/compare/llama_cpp.py", None): "llama.cpp's tensor names mapped onto the engine's hooks, and their "
                                           "layouts: the bridge from another program's names, as a dump's writer",
    ("engine/compare/gradcheck.py", None): "a finite-difference check of one attention head's softmax gradient: "
                                           "attention's scores and z by what it checks",
    ("engine/compare/against.py", "hook_in"): "TransformerLens's bridge's own extras (BRIDGE_SUFFIXES), which "
                                              "short_conv's hook_in only shares a name with",
    ("tinyllm_tui/recorder_hf.py", None): "names transformers' modules' outputs with the engine's hook names, as a "
                                          "user's own code does with tinyllm_tui.Recorder: the writer's side of the "
                                          "dump format, which runs only where torch and transformers are",
}


@functools.cache
def kind_hook_names() -> frozenset[str]:
    """The names of the hooks the kinds yield (within their module, or what they add to the residual) in every fixture
    checkpoint, less those the stack yields too (a norm's hook_normalized, hook_out)."""
    kinds = [module for roles in layers.ROLES.values() for module in roles.values()]
    modules, added = {module.MODULE for module in kinds}, {module.ADDED for module in kinds}
    theirs, stack = set(), set()
    for folder in sorted(p for p in (ROOT / "tests" / "fixtures").iterdir() if (p / "config.json").exists()):
        for site in Session(open_model(folder, ids=[1], max_new_tokens=1)).hooks:
            hook = site.hook
            owned = hook.in_block and (hook.module.split(".")[0] in modules or hook.name in added)
            (theirs if owned else stack).add(hook.name)
    return frozenset(theirs - stack)


def kind_literals(source: str, names: frozenset[str]) -> list[tuple[int, str]]:
    """(line, literal) of each string (not a docstring) in `source` that is one of a kind's hook names `names`."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    return [(node.lineno, node.value) for node in ast.walk(tree) if isinstance(node, ast.Constant)
            and isinstance(node.value, str) and node.value in names and id(node) not in docstrings]


def test_no_generic_module_names_a_kinds_hook():
    """A generic module asks the kinds for their hooks (engine.layers: masked, head_matrices, pattern_hooks, …)
    rather than comparing against one kind's hook name."""
    names, leaks, allowed = kind_hook_names(), [], set()
    for path in generic_modules():
        where = path.relative_to(ROOT).as_posix()
        for line, literal in kind_literals(path.read_text(encoding="utf-8"), names):
            key = next((k for k in ((where, literal), (where, None)) if k in LITERALS_ALLOWED), None)
            if key is None:
                leaks.append(f"{where}:{line}: {literal}")
            else:
                allowed.add(key)
    assert leaks == [], "a kind's hook names in generic modules (ask engine.layers):\n" + "\n".join(leaks)
    assert allowed == set(LITERALS_ALLOWED), f"allow-list entries nothing needs any more: {set(LITERALS_ALLOWED) - allowed}"


def test_the_kinds_hook_names_are_told_from_the_stacks():
    names = kind_hook_names()
    assert {"hook_attn_scores", "hook_pattern", "hook_conv_out", "hook_linear_attn_out", "hook_mlp_out",
            "hook_topk", "hook_latent"} <= names
    assert not names & {"hook_resid_mid", "hook_embed", "hook_normalized", "hook_scale", "hook_out"}


def test_the_literal_scan_sees_a_comparison_a_tuple_and_a_default_but_not_a_docstring():
    source = '''"""Compares against hook_pattern."""
def f(key, name="hook_z"):
    """hook_attn_scores in a docstring"""
    return key.hook.name == "hook_attn_scores" or name in ("hook_q", "hook_resid_mid")
'''
    assert sorted(kind_literals(source, kind_hook_names())) == [(2, "hook_z"), (4, "hook_attn_scores"), (4, "hook_q")]
