"""A scenario's `cache:` mapping: the KV-cache layout its sessions use (engine.caches).

    cache: {layout: ring, window: 4, sinks: 1}
    cache: {layout: paged, block_size: 2}
    cache: {quantize: int8, scale: per_head}   # or float8_e4m3 / float8_e5m2

A ring's window is the model's sliding window; a model without one gets the scenario's, so that
the full recompute masks what the ring evicts.
"""

from __future__ import annotations

import dataclasses

from engine.caches import CacheSpec, Layout, Quantize, ScaleAxis
from engine.causes import cause
from engine.loading.document import Node
from engine.spec import ModelSpec

CACHE_KEYS = {"layout", "window", "sinks", "block_size", "quantize", "scale"}
ONLY_WITH = {"window": Layout.RING, "sinks": Layout.RING, "block_size": Layout.PAGED}


def cache_options(node: Node, model: ModelSpec) -> tuple[CacheSpec, ModelSpec]:
    """The cache spec, and the model with the ring's window when it had none."""
    node.mapping(CACHE_KEYS)
    layout = Layout(node.get("layout").choice(tuple(Layout))) if node.has("layout") else Layout.CONTIGUOUS
    for key, needs in ONLY_WITH.items():
        if node.has(key) and layout is not needs:
            raise node.get(key).error(cause("cacheopt.only_with", needs=str(needs), key=key, layout=str(layout)))
    quantize = Quantize(node.get("quantize").choice(tuple(Quantize))) if node.has("quantize") else Quantize.NONE
    if quantize is not Quantize.NONE and layout is not Layout.CONTIGUOUS:
        raise node.get("quantize").error(cause("cacheopt.quantized", layout=str(layout)))
    scales = (ScaleAxis.PER_HEAD, ScaleAxis.PER_TOKEN)
    scale = ScaleAxis(node.get("scale").choice(scales)) if node.has("scale") else ScaleAxis.PER_HEAD
    if node.has("scale") and quantize is not Quantize.INT8:
        raise node.get("scale").error(cause("cacheopt.scale"))
    spec = CacheSpec(layout, sinks=node.get("sinks").integer(minimum=0) if node.has("sinks") else 0,
                     block_size=node.get("block_size").integer(minimum=1) if node.has("block_size") else 16,
                     quantize=quantize, scale=scale)
    if layout is Layout.RING:
        model = _with_window(node, model)
        spec = dataclasses.replace(spec, window=model.sliding_window)
    return spec, model


def _with_window(node: Node, model: ModelSpec) -> ModelSpec:
    if not node.has("window"):
        if model.sliding_window is None:
            raise node.error(cause("cacheopt.ring_window"))
        return model
    window = node.get("window").integer(minimum=1)
    if model.sliding_window is not None and model.sliding_window != window:
        raise node.get("window").error(cause("cacheopt.window", model=model.sliding_window, window=window))
    if not model.causal:
        raise node.get("window").error(cause("cacheopt.bidirectional"))
    blocks = None if model.layers is None else tuple(dataclasses.replace(b, window=window) for b in model.layers)
    return dataclasses.replace(model, sliding_window=window, layers=blocks)
