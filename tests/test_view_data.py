"""What the Debugger hands its views is data, not the engine's objects. The cache panel's K/V layouts reach the
views through the LayerState protocol alone: their facts word their own line (`words()`, a cause the catalogue
words in each language), a ring or a paged cache places its rows (`row_place`), and no module of tinyllm_tui names
a cache class. A diff report holds lines of its own, its routing flip too."""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Mapping

from conftest import ROOT
from engine import Session, make_backend
from engine.caches import CacheSpec, Layout, Quantize, ScaleAxis
from engine.causes import Cause
from engine.state import Positions, Size
from engine.trace import Phase
from test_caches import PROMPT, llama
from test_route_flips import SCENARIO as MOE
from tinyllm_tui.debugger.comparisons import Compared, Comparisons
from tinyllm_tui.debugger.frame import cache_frame
from tinyllm_tui.presentation.cache_layout import row_words
from tinyllm_tui.tui.widgets.cache import layout_line

CACHE_CLASSES = {"RingFacts", "PagedFacts", "QuantizedFacts", "RingCache", "PagedCache", "QuantizedCache",
                 "LayerCache"}


def named(tree: ast.AST) -> set[str]:
    """Every identifier a module's syntax tree names: names, attributes, imported names."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.alias):
            found.update({node.name.rsplit(".", 1)[-1], node.asname or ""})
    return found


def test_no_module_of_the_debugger_or_its_views_names_a_cache_class():
    naming = {str(path.relative_to(ROOT)): sorted(named(ast.parse(path.read_text(encoding="utf-8"))) & CACHE_CLASSES)
              for path in (ROOT / "tinyllm_tui").rglob("*.py")}
    assert len(naming) > 50 and {path: names for path, names in naming.items() if names} == {}


def shown(state, lang: str):
    frame = cache_frame(state, state.caches[0].fingerprint, 0, 0, frozenset(), row_words(lang))
    return layout_line(frame, lang), list(frame.views[0].rows[: len(frame.views[0].rows)])


def end_of_prefill(scenario):
    return [s for s in Session(scenario).steps() if s.round == 0][-1]


def test_a_ring_that_evicted_nothing_yet_says_so_with_its_sinks_in_each_language():
    # three tokens in 2 sinks + 3 ring slots: slots 0-2 hold them, the next goes to slot 3, none was evicted
    state = end_of_prefill(llama(PROMPT[:3], new=1, cache=CacheSpec(Layout.RING, window=4, sinks=2), window=4))
    line, rows = shown(state, "en")
    assert line == "ring w4+2 sinks · next s3 · evicted none"
    assert rows[3:] == ["s3↺ empty", "s4  empty"]
    line, rows = shown(state, "zh")
    assert line == "环形 窗口4+2 个汇聚位 · 下一槽 s3 · 已逐出 无"
    assert rows[3:] == ["槽3↺ 空", "槽4  空"] and rows[0].startswith("槽0  +0 · ")


def test_a_paged_and_a_per_token_quantized_cache_are_worded_in_chinese():
    shared = PROMPT[:5]
    states = list(Session(llama(shared, shared, max_new=(1, 3), cache=CacheSpec(Layout.PAGED, block_size=2))).steps())
    line, rows = shown([s for s in states if s.request == 1][-1], "zh")
    assert line == "分页 ×2 · 块表 [0* 1* 3 4]（*共享）· 池 5 块"
    assert [label.split(" ")[0] for label in rows] == ["b0.0", "b0.1", "b1.0", "b1.1", "b3.0", "b3.1", "b4.0"]
    quantized = end_of_prefill(llama(PROMPT, cache=CacheSpec(quantize=Quantize.INT8, scale=ScaleAxis.PER_TOKEN)))
    # nine rows of K and V, 2 kv heads × 4: one byte a code, one float64 scale per row
    codes, scales = 9 * 8 * 2, 9 * 8 * 2
    assert shown(quantized, "zh")[0] == f"int8 每词元：存 {codes + scales} B（精确 1.1 KiB）"
    assert shown(quantized, "en")[0] == f"int8 per token: {codes + scales} B stored (exact 1.1 KiB)"


WORDED = (Cause, Phase, Size, Positions)  # the engine's words' data: a cause, a phase, a size, positions


def engine_objects(value) -> set[str]:
    """The engine's types found in `value`, through dataclasses, mappings and collections, other than WORDED."""
    if isinstance(value, WORDED):
        return set()
    found = {type(value).__qualname__} if type(value).__module__.startswith("engine") else set()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        parts = [getattr(value, f.name) for f in dataclasses.fields(value)]
    elif isinstance(value, Mapping):
        parts = [*value.keys(), *value.values()]
    elif isinstance(value, (tuple, list, set, frozenset)):
        parts = list(value)
    else:
        parts = []
    return found.union(*map(engine_objects, parts))


def test_a_diff_report_and_a_cache_frame_hold_no_engine_object():
    report = Comparisons(make_backend("numpy", "float32"), None, lambda: Compared(MOE, None, None)).compare()
    assert report.flip is not None and report.diffs and engine_objects(report) == set()
    ring = end_of_prefill(llama(PROMPT, new=1, cache=CacheSpec(Layout.RING, window=4, sinks=1), window=4))
    frame = cache_frame(ring, ring.caches[0].fingerprint, 0, 0, frozenset(), row_words("en"))
    assert engine_objects(frame) == set()
