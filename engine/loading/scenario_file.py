"""Load and check a scenario file: vocabulary, model, weights, requests, decode rule.

A scenario may instead name a checkpoint (`checkpoint: PATH`), which gives the vocabulary,
model and weights; the file still states its requests, decode rule, breakpoints and expectations.

The scenario's text is kept beside the checked values so that edited weights can later
be written back with the user's comments and layout intact (`engine.loading.edits`).
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from enum import StrEnum

import numpy as np
from yaml.nodes import SequenceNode

from engine.breakpoints import BreakpointError, parse_breakpoint
from engine.interventions import Intervention, InterventionError, check_intervention, parse_any
from engine.loading.file_kinds import is_checkpoint
from engine.loading.budget import DEFAULT_BUDGET, check_budget
from engine.causes import cause
from engine.loading.document import Node, ScenarioError, inner, joined, parse, read_text
from engine.compare.expect import parse_expectations
from engine.parameters import Shape, format_shape, name_parts, parameter_shapes
from engine.progress import WEIGHTS, report
from engine.layers import FFNS, MIXERS, layer_options
from engine.spec import (
    Chat,
    DecodeRule,
    FfnKind,
    LayerContext,
    LayerOption,
    LayerSpec,
    Message,
    ModelSpec,
    NormKind,
    NormPlacement,
    NormSpec,
    Positions,
    Request,
    Rule,
    Vocab,
)
from engine.loading.weightfile import WeightSource, read_weights
from engine.loading.cache_options import cache_options
from engine.caches import CacheSpec
from engine.scenario import Scenario

__all__ = ["ScenarioError", "load_scenario", "load_scenario_text"]

TOP_KEYS = {"title", "checkpoint", "vocab", "model", "weights", "requests", "decode", "breakpoints", "expect",
            "cache", "batch", "interventions"}
INLINE_MODEL_KEYS = ("vocab", "model", "weights")  # what `checkpoint:` replaces


def load_scenario(path: str | Path, *, max_memory: int | None = None, dtype: str = "float64") -> Scenario:
    """Read and check a scenario; a model whose weights alone exceed `max_memory` bytes
    (default: `budget.DEFAULT_BUDGET`) as `dtype` is refused before any weight is read."""
    path = Path(path)
    return _build(read_text(path), str(path), max_memory, dtype)


def load_scenario_text(text: str, file: str = "<text>", *, max_memory: int | None = None,
                       dtype: str = "float64") -> Scenario:
    return _build(text, file, max_memory, dtype)


def _build(text: str, file: str, max_memory: int | None, dtype: str) -> Scenario:
    root = Node(parse(text, file), "", 1, file)
    from_checkpoint = root.has("checkpoint")
    root.mapping(TOP_KEYS, {"requests", *(() if from_checkpoint else INLINE_MODEL_KEYS)})
    if from_checkpoint:
        base, encoder = _checkpoint(root, max_memory, dtype)
        vocab, model, weights, source = base.vocab, base.model, base.weights, None
    else:
        vocab, model, weights, source = _inline(root, max_memory, dtype)
        encoder = None
    decode = _decode(root.get("decode"), vocab) if root.has("decode") else DecodeRule()
    cache, model = cache_options(root.get("cache"), model) if root.has("cache") else (CacheSpec(), model)
    return Scenario(
        path=file,
        title=root.get("title").text() if root.has("title") else Path(file).stem,
        vocab=vocab,
        model=model,
        weights=weights,
        requests=(requests := _requests(root.get("requests"), vocab, decode, model, encoder)),
        decode=decode,
        expect=parse_expectations(root.get("expect"), requests, model) if root.has("expect") else (),
        breakpoints=_breakpoints(root.get("breakpoints")) if root.has("breakpoints") else (),
        interventions=_interventions(root.get("interventions"), model, len(requests), len(vocab))
        if root.has("interventions") else (),
        document=None if from_checkpoint else text,  # no inline weights to write edits back into
        weights_source=source,
        cache=cache,
        batch=_batch(root, model),
    )


def _batch(root: Node, model: ModelSpec) -> bool:
    if not root.has("batch"):
        return False
    node = root.get("batch")
    if node.boolean() and not model.lm_head:
        raise node.error(cause("scenario.encoder_batch"))
    return node.boolean()


def _inline(root: Node, max_memory: int | None,
            dtype: str) -> tuple[Vocab, ModelSpec, dict[str, np.ndarray], WeightSource | None]:
    vocab = _vocab(root.get("vocab"))
    model = _model(root.get("model"))
    check_budget(root.get("model"), model, len(vocab), dtype, DEFAULT_BUDGET if max_memory is None else max_memory)
    weights, source = _weights(root.get("weights"), parameter_shapes(model, len(vocab)))
    return vocab, model, weights, source


def _breakpoints(node: Node) -> tuple[str, ...]:
    texts = []
    for item in node.items():
        try:
            texts.append(parse_breakpoint(item.text()).text)
        except BreakpointError as error:
            raise item.error(error.cause) from None
    return tuple(texts)


def _interventions(node: Node, model: ModelSpec, requests: int, vocab: int) -> tuple[Intervention, ...]:
    """`interventions:` a list of specs as `--patch` or `--ablate` take them (engine.interventions)."""
    parsed = []
    for item in node.items():
        try:
            parsed.append(parse_any(item.text()))
            check_intervention(parsed[-1], model, requests, vocab)
        except InterventionError as error:
            raise item.error(error.cause) from None
    return tuple(parsed)


# -- checkpoint -----------------------------------------------------------------
def _checkpoint(root: Node, max_memory: int | None, dtype: str) -> tuple[Scenario, Encoder | None]:
    """Vocabulary, model and weights from the checkpoint that `checkpoint:` names (relative to this file)."""
    for key in INLINE_MODEL_KEYS:
        if root.has(key):
            raise root.get(key).error(cause("scenario.inline_and_checkpoint", key=key))
    node = root.get("checkpoint")
    path = Path(node.file).parent / Path(node.text()).expanduser()
    if not path.exists():
        raise node.error(cause("scenario.no_checkpoint", path=str(path)))
    if not is_checkpoint(path):
        raise node.error(cause("scenario.not_checkpoint", path=str(path)))
    from engine.loading.checkpoint import load_checkpoint  # its readers load only for a checkpoint

    base = load_checkpoint(path, ids=[0], dtype=dtype, max_memory=max_memory)  # the requests come from this file
    return base, _encoder(Path(base.path))


def _encoder(path: Path) -> Encoder | None:
    """The checkpoint's tokenizer for `text:` and `messages:` requests; None for a folder without tokenizer.json."""
    if path.suffix != ".gguf" and not (path / "tokenizer.json").exists():
        return None
    return Encoder(path)


class Encoder:
    """A checkpoint's own tokenizer, read on the first request that needs it (load_checkpoint has checked it)."""

    def __init__(self, path: Path):
        self.path = path

    def encode(self, text: str) -> tuple[int, ...]:
        from engine.loading.tokenizer import encode  # tokenizers loads only for a checkpoint's text

        return encode(self._tokenizer, text)

    def chat(self, messages: list[Message]) -> Chat:
        """The conversation through the checkpoint's own chat template (engine.loading.chat)."""
        from engine.loading.chat import find_template, tokenize_chat  # jinja2 loads only for a chat

        return tokenize_chat(find_template(self.path), self._tokenizer, messages)

    @cached_property
    def _tokenizer(self):
        from tokenizers import Tokenizer

        from engine.loading.gguf_model import GGUFModel
        from engine.loading.tokenizer import gguf_tokenizer

        if self.path.suffix == ".gguf":
            model = GGUFModel(self.path)
            return gguf_tokenizer(model.meta, model.error)
        loaded = Tokenizer.from_file(str(self.path / "tokenizer.json"))
        loaded.no_padding()
        return loaded


# -- vocabulary -----------------------------------------------------------------
VOCAB_KEYS = {"tokens", "pad", "eos"}


def _vocab(node: Node) -> Vocab:
    node.mapping(VOCAB_KEYS, {"tokens"})
    listed = node.get("tokens")
    tokens = listed.texts() or tuple(item.text() for item in listed.items())
    if len(set(tokens)) != len(tokens):
        seen: set[str] = set()
        item = next(item for item, token in zip(listed.items(), tokens) if token in seen or seen.add(token))
        raise item.error(cause("scenario.token_twice", token=item.value))
    if not tokens:
        raise listed.error(cause("scenario.empty_vocab"))
    vocab = Vocab(tokens)
    special = {key: _token_id(node.get(key), vocab) for key in ("pad", "eos") if node.has(key)}
    return Vocab(tokens, **special)


def _token_id(node: Node, vocab: Vocab) -> int:
    """A token given as its text (`爱`) or its id (`2`)."""
    if isinstance(node.value, int) and not isinstance(node.value, bool):
        if not 0 <= node.value < len(vocab):
            raise node.error(cause("scenario.token_id_range", id=node.value, last=len(vocab) - 1))
        return node.value
    text = node.text()
    if text not in vocab.tokens:
        raise node.error(cause("scenario.unknown_token", token=text))
    return vocab.tokens.index(text)


# -- model ----------------------------------------------------------------------
MODEL_KEYS = {
    "d_model", "layers", "heads", "d_head", "norm", "final_norm", "positions",
    "max_positions", "ffn", "bias", "tied_unembed", "causal", "lm_head", "dropout",
    "kv_heads", "window", "rope",
}
ROPE_KEYS = {"theta", "rotary_dims"}
LAYER_KEYS = {"mixer", "ffn", "window", "rope_theta"}  # every layer's; beside them, its kinds' LAYER_OPTIONS


def writable_mixers() -> tuple[str, ...]:
    """The mixer kinds a scenario file can configure (a Gated DeltaNet's shape comes from a checkpoint's config)."""
    return tuple(name for name, kind in MIXERS.items() if not getattr(kind, "CHECKPOINT_ONLY", False))


NORM_KEYS = {"kind", "placement", "eps", "affine"}
FFN_KEYS = {"kind", "d_ff"}
DROPOUT_KEYS = {"rate", "seed", "training"}


def _model(node: Node) -> ModelSpec:
    node.mapping(MODEL_KEYS, {"d_model", "layers", "heads", "ffn"})
    d_model = node.get("d_model").integer(minimum=1)
    heads_node = node.get("heads")
    heads = heads_node.integer(minimum=1)
    if node.has("d_head"):
        d_head = node.get("d_head").integer(minimum=1)
    elif d_model % heads:
        raise heads_node.error(cause("scenario.heads_divide", heads=heads, d_model=d_model))
    else:
        d_head = d_model // heads
    norm = _norm(node.get("norm")) if node.has("norm") else NormSpec()
    positions = Positions(node.get("positions").choice(tuple(Positions))) if node.has("positions") else Positions.NONE
    if positions is Positions.LEARNED and not node.has("max_positions"):
        raise node.error(cause("scenario.max_positions"))
    ffn_node = node.get("ffn").mapping(FFN_KEYS, FFN_KEYS)
    causal = _flag(node, "causal", True)
    attention = {**_kv_heads(node, heads), **_rope(node, positions, d_head), **_window(node, causal)}
    layers = node.get("layers")
    if isinstance(layers.raw, SequenceNode):
        attention |= _layers(layers, positions, causal)
    return ModelSpec(
        d_model=d_model,
        n_layers=len(attention["layers"]) if "layers" in attention else layers.integer(minimum=1),
        n_heads=heads,
        d_head=d_head,
        d_ff=ffn_node.get("d_ff").integer(minimum=1),
        norm=norm,
        final_norm=_flag(node, "final_norm", norm.kind is not NormKind.NONE),
        ffn=_kind(ffn_node.get("kind"), FfnKind),
        positions=positions,
        max_positions=node.get("max_positions").integer(minimum=1) if node.has("max_positions") else 0,
        bias=_flag(node, "bias", False),
        tied_unembed=_flag(node, "tied_unembed", True),
        causal=causal,
        lm_head=_flag(node, "lm_head", True),
        **(_dropout(node.get("dropout")) if node.has("dropout") else {}),
        **attention,
    )


def _kv_heads(node: Node, heads: int) -> dict:
    """`kv_heads: 2`: grouped-query attention, each kv head read by heads / kv_heads query heads."""
    if not node.has("kv_heads"):
        return {}
    kv_node = node.get("kv_heads")
    kv_heads = kv_node.integer(minimum=1)
    if heads % kv_heads:
        raise kv_node.error(cause("scenario.kv_heads_divide", kv_heads=kv_heads, heads=heads))
    return {"kv_heads": kv_heads}


def _rope(node: Node, positions: Positions, d_head: int) -> dict:
    """`rope: {theta: 10000, rotary_dims: 4}` under `positions: rope` (rotary_dims: partial rotary)."""
    if positions is Positions.ROPE and d_head % 2:
        raise node.get("positions").error(cause("scenario.rope_odd", d_head=d_head))
    if not node.has("rope"):
        return {}
    rope = node.get("rope").mapping(ROPE_KEYS)
    if positions is not Positions.ROPE:
        raise rope.error(cause("scenario.rope_positions"))
    found = {"rope_theta": _positive(rope.get("theta"))} if rope.has("theta") else {}
    if rope.has("rotary_dims"):
        dims_node = rope.get("rotary_dims")
        dims = dims_node.integer(minimum=2)
        if dims % 2 or dims > d_head:
            raise dims_node.error(cause("scenario.rotary_dims", d_head=d_head, dims=dims))
        found["rope_dims"] = dims
    return found


def _window(node: Node, causal: bool) -> dict:
    """`window: 4` on the model: every layer's attention slides (query i reads keys j > i − 4)."""
    if not node.has("window"):
        return {}
    return {"sliding_window": _window_size(node.get("window"), causal)}


def _window_size(node: Node, causal: bool) -> int:
    window = node.integer(minimum=1)
    if not causal:
        raise node.error(cause("scenario.bidirectional_window"))
    return window


def _layers(node: Node, positions: Positions, causal: bool) -> dict:
    """`layers: [{mixer: attention, window: 4}, {mixer: short_conv, kernel: 2}]`: each block's kinds and their
    options; the blocks' windows also set the model's sliding window where they share one."""
    blocks, offered = [], _offered_options()
    for item in node.items():
        item.mapping(LAYER_KEYS | set(offered))
        mixer = item.get("mixer").choice(writable_mixers()) if item.has("mixer") else LayerSpec.mixer
        ffn = item.get("ffn").choice(tuple(FFNS)) if item.has("ffn") else LayerSpec.ffn
        blocks.append(LayerSpec(
            mixer=mixer,
            ffn=ffn,
            window=_window_size(item.get("window"), causal) if item.has("window") else None,
            rope_theta=_layer_theta(item, positions),
            options=_kind_options(item, mixer, ffn, offered, LayerContext(positions, causal))))
    if not blocks:
        raise node.error(cause("scenario.no_layers"))
    windows = {block.window for block in blocks} - {None}
    if len(windows) != 1:
        return {"layers": tuple(blocks)}
    return {"layers": tuple(blocks), "sliding_window": windows.pop(),
            "sliding_layers": tuple(i for i, block in enumerate(blocks) if block.window is not None)}


def _offered_options() -> dict[str, LayerOption]:
    """The per-layer options of every kind a scenario can write (their modules' LAYER_OPTIONS), by key."""
    kinds = [*(MIXERS[name] for name in writable_mixers()), *FFNS.values()]
    return {key: option for kind in kinds for key, option in getattr(kind, "LAYER_OPTIONS", {}).items()}


def _kind_options(item: Node, mixer: str, ffn: str, offered: dict[str, LayerOption],
                  context: LayerContext) -> dict:
    """The options the layer's kinds take (`kernel: 3`), each given or its default; another kind's is refused."""
    taken = layer_options(mixer, ffn)
    for key in sorted(set(offered) - set(taken)):
        if item.has(key):
            raise item.get(key).error(cause(offered[key].elsewhere, mixer=mixer, ffn=ffn))
    return {key: option.parse(item.get(key), context) if item.has(key) else option.default
            for key, option in taken.items()}


def _layer_theta(item: Node, positions: Positions) -> float | None:
    if not item.has("rope_theta"):
        return None
    if positions is not Positions.ROPE:
        raise item.get("rope_theta").error(cause("scenario.layer_theta"))
    return _positive(item.get("rope_theta"))


def _kind(node: Node, kinds: type[StrEnum]) -> StrEnum:
    """One of an enum's values, parsed once here (the error names the node and the values)."""
    return kinds(node.choice(tuple(kinds)))


def _dropout(node: Node) -> dict:
    """`dropout: {rate: 0.1, seed: 0, training: true}`: off unless training is true."""
    node.mapping(DROPOUT_KEYS, {"rate"})
    rate = node.get("rate").number()
    if not 0 <= rate < 1:
        raise node.get("rate").error(cause("scenario.dropout_rate", rate=rate))
    return {
        "dropout": rate,
        "dropout_seed": node.get("seed").integer(minimum=0) if node.has("seed") else 0,
        "training": _flag(node, "training", False),
    }


def _norm(node: Node) -> NormSpec:
    node.mapping(NORM_KEYS, {"kind"})
    eps = node.get("eps").number() if node.has("eps") else NormSpec.eps
    if eps < 0:
        raise node.get("eps").error(cause("scenario.eps", eps=eps))
    return NormSpec(
        kind=_kind(node.get("kind"), NormKind),
        placement=_kind(node.get("placement"), NormPlacement) if node.has("placement") else NormPlacement.PRE,
        eps=eps,
        affine=_flag(node, "affine", False),
    )


def _flag(node: Node, key: str, default: bool) -> bool:
    return node.get(key).boolean() if node.has(key) else default


# -- weights --------------------------------------------------------------------
def _weights(node: Node, shapes: dict[str, Shape]) -> tuple[dict[str, np.ndarray], WeightSource | None]:
    """Inline (the document's own layout) or from the file that `weights: {file: …}` names."""
    if node.is_mapping and node.has("file"):
        node.mapping({"file"})
        name = node.get("file")
        path = Path(node.file).parent / name.text()
        if not path.is_file():
            raise name.error(cause("scenario.no_weight_file", path=str(path)))
        source = read_weights(path, shapes)
        return dict(source.arrays), source
    _check_layout(node, _layout(shapes))
    weights = {}
    for done, (name, shape) in enumerate(shapes.items(), 1):
        leaf = node
        for part in name_parts(name):
            leaf = leaf.items()[part] if isinstance(part, int) else leaf.get(part)
        weights[name] = parse_tensor(leaf, shape)
        report(WEIGHTS, done, len(shapes))
    return weights, None


def _layout(shapes: dict[str, Shape]) -> dict:
    """Nest parameter names into the shape the document must have ({"blocks": {0: {...}}})."""
    tree: dict = {}
    for name in shapes:
        *parents, leaf = name_parts(name)
        branch = tree
        for part in parents:
            branch = branch.setdefault(part, {})
        branch[leaf] = name
    return tree


def _check_layout(node: Node, tree: dict) -> None:
    """Every mapping and list holds exactly the keys and items the model needs."""
    if all(isinstance(key, int) for key in tree):
        items = node.items()
        if len(items) != len(tree):
            raise node.error(cause("scenario.layer_entries", expected=len(tree), got=len(items)))
        for i, item in enumerate(items):
            _check_layout(item, tree[i])
        return
    node.mapping(set(tree), set(tree))
    for key, sub in tree.items():
        if isinstance(sub, dict):
            _check_layout(node.get(key), sub)


def parse_tensor(node: Node, shape: Shape) -> np.ndarray:
    """A vector or matrix written out, or a shorthand: identity, zeros, ones, {scale: s}."""
    if isinstance(node.value, str):
        return _shorthand(node, node.value, shape)
    if node.is_mapping:
        node.mapping({"scale"}, {"scale"})
        return _shorthand(node, "identity", shape) * node.get("scale").number()
    array = node.numbers(len(shape))
    if array is not None and array.shape == shape:
        return array
    rows = node.items()
    cells = [rows] if len(shape) == 1 else [row.items() for row in rows]
    widths = {len(row) for row in cells}
    got = (len(rows),) if len(shape) == 1 else (len(rows), *sorted(widths - {shape[1]} or widths))
    if got != shape:
        bad_row = next((row for row, n in zip(rows, map(len, cells)) if len(shape) == 2 and n != shape[1]), node)
        where = Node(node.raw, node.path, bad_row.line, node.file)  # the matrix, at its first wrong row
        raise where.error(cause("scenario.tensor_shape", expected=format_shape(shape), got=format_shape(got)))
    numbers = [[cell.number() for cell in row] for row in cells]
    return np.array(numbers[0] if len(shape) == 1 else numbers, dtype=np.float64)


def _shorthand(node: Node, word: str, shape: Shape) -> np.ndarray:
    if word == "zeros":
        return np.zeros(shape)
    if word == "ones":
        return np.ones(shape)
    if word == "identity":
        if len(shape) != 2 or shape[0] != shape[1]:
            raise node.error(cause("scenario.identity_square", shape=format_shape(shape)))
        return np.eye(shape[0])
    raise node.error(cause("scenario.shorthand", word=word))


# -- requests and decoding --------------------------------------------------------
PROMPT_KEYS = ("tokens", "ids", "text", "messages")  # exactly one per request
MESSAGE_KEYS = {"role", "content"}
REQUEST_KEYS = {*PROMPT_KEYS, "max_new_tokens", "pad_to", "vectors"}


def _requests(node: Node, vocab: Vocab, decode: DecodeRule, model: ModelSpec,
              encoder: Encoder | None) -> tuple[Request, ...]:
    items = node.items()
    if not items:
        raise node.error(cause("scenario.no_requests"))
    return tuple(_request(item, vocab, decode, model, encoder) for item in items)


def _request(item: Node, vocab: Vocab, decode: DecodeRule, model: ModelSpec, encoder: Encoder | None) -> Request:
    item.mapping(REQUEST_KEYS)
    given = [key for key in PROMPT_KEYS if item.has(key)]
    if not given:
        raise item.error(cause("scenario.no_prompt"))
    if len(given) > 1:
        raise item.get(given[1]).error(cause("scenario.prompt_keys", keys=", ".join(PROMPT_KEYS),
                                                         given=joined(given, "doc.and")))
    chat = _chat(item.get("messages"), vocab, encoder) if given[0] == "messages" else None
    tokens = chat.ids if chat else _prompt(item.get(given[0]), vocab, encoder)
    if not tokens:
        raise item.get(given[0]).error(cause("scenario.empty_request"))
    if item.has("pad_to"):
        tokens = _padded(item.get("pad_to"), tokens, vocab)
    limit = item.get("max_new_tokens").integer(minimum=1) if item.has("max_new_tokens") else decode.max_new_tokens
    needed = len(tokens) + limit - 1  # the last chosen token is never fed
    if model.positions == Positions.LEARNED and needed > model.max_positions:
        raise item.error(cause("scenario.positions", needed=needed, tokens=len(tokens), fed=limit - 1,
                               max_positions=model.max_positions))
    vectors = None
    if item.has("vectors"):
        if model.lm_head:
            raise item.get("vectors").error(cause("scenario.vectors_decoder"))
        array = parse_tensor(item.get("vectors"), (len(tokens), model.d_model))
        vectors = tuple(tuple(float(x) for x in row) for row in array)
    return Request(tokens=tokens, max_new_tokens=limit, vectors=vectors, chat=chat)


def _prompt(node: Node, vocab: Vocab, encoder: Encoder | None) -> tuple[int, ...]:
    """`tokens: [pieces or ids]`, `ids: [ids]`, or `text: "…"` for the checkpoint's tokenizer."""
    if node.path.endswith(".text"):
        if encoder is None:
            raise node.error(cause("scenario.text_needs_tokenizer"))
        from engine.loading.tokenizer import TokenizerError

        try:
            return encoder.encode(node.text())
        except TokenizerError as error:
            raise node.error(cause("scenario.cannot_encode", why=str(error))) from None  # tokenizers' words
    items = node.items()
    if node.path.endswith(".ids"):
        for item in items:
            item.integer()  # ids only, never a piece's text
    return tuple(_token_id(item, vocab) for item in items)


def _chat(node: Node, vocab: Vocab, encoder: Encoder | None) -> Chat:
    """`messages: [{role: user, content: "…"}]`, through the checkpoint's chat template."""
    if encoder is None:
        raise node.error(cause("scenario.chat_needs_template"))
    messages = []
    for item in node.items():
        item.mapping(MESSAGE_KEYS, MESSAGE_KEYS)
        messages.append(Message(item.get("role").text(), item.get("content").text()))
    if not messages:
        raise node.error(cause("scenario.no_messages"))
    try:
        chat = encoder.chat(messages)
    except ScenarioError as error:  # the template's refusal, said at the request it refused
        raise node.error(inner(error)) from None
    if max(chat.ids) >= len(vocab):
        raise node.error(cause("scenario.chat_token", id=max(chat.ids), rows=len(vocab)))
    return chat


def _padded(node: Node, tokens: tuple[int, ...], vocab: Vocab) -> tuple[int, ...]:
    length = node.integer(minimum=1)
    if vocab.pad is None:
        raise node.error(cause("scenario.pad_token"))
    if length < len(tokens):
        raise node.error(cause("scenario.pad_short", length=length, tokens=len(tokens)))
    return tokens + (vocab.pad,) * (length - len(tokens))


DECODE_KEYS = {
    "rule", "forbid", "max_new_tokens", "stop_at_eos", "temperature", "top_k", "top_p", "seed",
    "prefill_chunk",
}


def _decode(node: Node, vocab: Vocab) -> DecodeRule:
    node.mapping(DECODE_KEYS)
    optional = {
        "max_new_tokens": lambda n: n.integer(minimum=1),
        "temperature": _positive,
        "top_k": lambda n: n.integer(minimum=1),
        "top_p": _probability,
        "seed": lambda n: n.integer(minimum=0),
        "prefill_chunk": lambda n: n.integer(minimum=1),
        "stop_at_eos": Node.boolean,
        "rule": lambda n: _kind(n, Rule),
    }
    values = {key: read(node.get(key)) for key, read in optional.items() if node.has(key)}
    if node.has("forbid"):
        values["forbid"] = _forbidden(node.get("forbid"), vocab)
    return DecodeRule(**values)


def _forbidden(node: Node, vocab: Vocab) -> tuple[int, ...]:
    forbid = tuple(_token_id(item, vocab) for item in node.items())
    if len(set(forbid)) == len(vocab.tokens):
        raise node.error(cause("scenario.forbid_all", tokens=len(vocab.tokens)))
    return forbid


def _positive(node: Node) -> float:
    value = node.number()
    if value <= 0:
        raise node.error(cause("scenario.positive", value=value))
    return value


def _probability(node: Node) -> float:
    value = node.number()
    if not 0 < value <= 1:
        raise node.error(cause("scenario.probability", value=value))
    return value
