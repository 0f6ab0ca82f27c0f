"""Real checkpoints as scenarios: Hugging Face folders (llama, qwen2, gpt2, bert) and llama GGUF files.

    scenario = load_checkpoint("SmolLM2-135M-Instruct.Q4_1.gguf", prompt="The capital of France is",
                               max_new_tokens=6)

The Scenario is the same dataclass a YAML file gives: weights under the engine's parameter
names, one request (the prompt's ids from the checkpoint's own tokenizer, or ids given
directly), greedy decoding, and a vocabulary whose entries are each id's text.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from engine.loading.chat import Chat, Message, find_template, tokenize_chat
from engine.loading.budget import DEFAULT_BUDGET, format_size, resident_weight_bytes, too_many_tensors
from engine.causes import cause
from engine.loading.document import ScenarioError, library_text, warn
from engine.parameters import format_shape, parameter_shapes
from engine.progress import WEIGHTS, report
from engine.scenario import Scenario
from engine.spec import DecodeRule, ModelSpec, Positions, Request
from engine.loading import hf, hf_mxfp4
from engine.loading.gguf_checks import gguf_damage
from engine.loading.gguf_file import LayoutError
from engine.loading.gguf_model import GGUFModel, Quantisation
from engine.loading.weightfile import file_identity
from engine.lazy_weights import LazyWeights, WeightCache
from engine.loading.tokenizer import (TokenizerError, encode, gguf_tokenizer, make_vocab, numbered_vocab, token_id,
                                     tokenizer_errors)

__all__ = ["load_checkpoint"]

DTYPES = {"float64": np.float64, "float32": np.float32}
Getter = Callable[[str], np.ndarray]  # a checkpoint's tensor by its own name
Weight = Callable[[str, Getter], np.ndarray]  # (engine parameter name, tensor getter) -> its array
RowsGetter = Callable[[np.ndarray], Getter]  # row indices -> a getter of those rows of a checkpoint's tensor
ROW_TABLES = frozenset({"embed", "per_layer_embed"})  # read by token id: a pass needs only its tokens' rows


def load_checkpoint(path: str | Path, *, prompt: str | list[str] | None = None,
                    ids: list[int] | list[list[int]] | None = None, chat: list[list[Message]] | None = None,
                    max_new_tokens: int = 1, dtype: str = "float64", max_memory: int | None = None) -> Scenario:
    """Open a checkpoint with a request per prompt (tokenized by its own tokenizer), list of ids, or
    conversation (rendered by the checkpoint's chat template, then tokenized: engine.loading.chat).

    Args:
        dtype: how the weights are kept ("float64" or "float32"); a session's backend
            computes in its own dtype either way.
        max_memory: bytes the weights may take as `dtype` (default: half the RAM); a bigger
            model is refused before any tensor is read.
    Raises ScenarioError (file, key, what) for anything it cannot honour.
    """
    path = Path(path)
    if path.name == "config.json":
        path = path.parent
    budget = (DEFAULT_BUDGET if max_memory is None else max_memory, dtype)
    if path.suffix != ".gguf" and not (path / "config.json").exists():
        raise ScenarioError(str(path), None, "config.json", cause("checkpoint.no_config"))
    try:
        read = _gguf if path.suffix == ".gguf" else _hf
        spec, weights, tokenizer, special = read(path, budget)
    except ScenarioError:
        raise
    except LayoutError as error:  # the walk of the layout says where a truncated or damaged file goes wrong
        raise gguf_damage(path) or ScenarioError(str(path), None, error.key, error.message) from None
    except OSError as error:
        raise ScenarioError(error.filename or str(path), None, "", cause("doc.unreadable",
                                                                            why=error.strerror or str(error))) from None
    except Exception as error:  # a check this reader lacks: said as such rather than as a traceback
        raise ScenarioError(str(path), None, "", cause("checkpoint.internal", error=type(error).__name__,
                                                       why=library_text(error))) from None
    rows = weights.shapes["embed"][0]
    vocab = make_vocab(tokenizer, rows, **special) if tokenizer else numbered_vocab(rows, **special)
    if chat:
        chats = _chats(path, tokenizer, len(vocab), chat, given=prompt or ids)
        tokens = [c.ids for c in chats]
    else:
        tokens = [_request_ids(path, tokenizer, len(vocab), *given) for given in _one_each(path, prompt, ids)]
        chats = [None] * len(tokens)
    limit = max_new_tokens if spec.lm_head else 1
    longest = max(map(len, tokens))
    if spec.positions == Positions.LEARNED and longest + limit - 1 > spec.max_positions:
        raise ScenarioError(str(path), None, "--max-new-tokens", cause("checkpoint.positions",
                                                                      needed=longest + limit - 1,
                                                                      positions=spec.max_positions))
    return Scenario(
        path=str(path), title=path.stem if path.suffix == ".gguf" else path.name, vocab=vocab, model=spec,
        weights=weights,
        requests=tuple(Request(tokens=t, max_new_tokens=limit, chat=c) for t, c in zip(tokens, chats)),
        decode=DecodeRule(max_new_tokens=limit),
    )


def _one_each(path: Path, prompt: str | list[str] | None,
              ids: list[int] | list[list[int]] | None) -> list[tuple[str | None, list[int] | None]]:
    """(prompt, ids) for each request: one per prompt given, or one per list of ids."""
    if isinstance(prompt, list) and isinstance(ids, list) and prompt and ids:
        raise ScenarioError(str(path), None, "--prompt/--ids", cause("checkpoint.prompts_and_ids"))
    if isinstance(prompt, list) and prompt:
        return [(text, None) for text in prompt]
    if ids and isinstance(ids[0], list):
        return [(None, each) for each in ids]
    return [(None if isinstance(prompt, list) else prompt, ids or None)]


def _request_ids(path: Path, tokenizer: Tokenizer | None, size: int, prompt: str | None,
                 ids: list[int] | None) -> tuple[int, ...]:
    if (prompt is None) == (ids is None):
        raise ScenarioError(str(path), None, "--prompt/--ids", cause("checkpoint.prompt_or_ids"))
    if tokenizer is None and prompt is not None:
        raise ScenarioError(str(path), None, "tokenizer.json", cause("checkpoint.prompt_tokenizer"))
    try:
        tokens = encode(tokenizer, prompt) if ids is None else tuple(ids)
    except TokenizerError as error:
        source = path if path.suffix == ".gguf" else path / "tokenizer.json"
        raise ScenarioError(str(source), None, "--prompt", cause("checkpoint.cannot_encode",
                                                                            why=str(error))) from None
    bad = [t for t in tokens if not 0 <= t < size]
    if bad:
        raise ScenarioError(str(path), None, "--ids", cause("scenario.token_id_range", id=bad[0],
                                                                             last=size - 1))
    if not tokens:
        raise ScenarioError(str(path), None, "--prompt", cause("checkpoint.no_tokens"))
    return tokens


def _chats(path: Path, tokenizer: Tokenizer | None, size: int, conversations: list[list[Message]],
           given) -> list[Chat]:
    """Each conversation through the checkpoint's own chat template and tokenizer."""
    if given:
        raise ScenarioError(str(path), None, "--chat", cause("checkpoint.chat_and"))
    if tokenizer is None:
        raise ScenarioError(str(path), None, "tokenizer.json", cause("checkpoint.chat_tokenizer"))
    template = find_template(path)
    chats = [tokenize_chat(template, tokenizer, [Message(*m) for m in messages]) for messages in conversations]
    bad = [t for c in chats for t in c.ids if t >= size]
    if bad:
        raise template.error(cause("scenario.chat_token", id=bad[0], rows=size))
    return chats


def _refuse_too_many(path: Path, spec: ModelSpec, vocab_size: int) -> None:
    """A config whose tensors would not fit in memory as Python objects is refused before any of them is listed."""
    too_many = too_many_tensors(spec, vocab_size)
    if too_many:
        raise ScenarioError(str(path), None, "layers", too_many)


def _checked(path: Path, spec: ModelSpec, vocab_size: int, weight: Weight, tensors: tuple[Getter, Getter],
             budget: tuple[int, str], identity: str, rows: RowsGetter | None = None) -> LazyWeights:
    """Every parameter the spec needs, its shape checked now through `weight(name, stand_in)` on
    zero-byte stand-ins (nothing is read), each read through `weight(name, load)` on first use; the tables read
    by token id (ROW_TABLES) give some rows alone through `weight(name, rows(ids))` where `rows` is given."""
    stand_in, load = tensors
    limit, dtype = budget
    need = resident_weight_bytes(spec, vocab_size, dtype)  # a sparse model's experts: only those a token uses
    if need > limit:
        raise ScenarioError(str(path), None, "--max-memory", cause("checkpoint.budget", need=format_size(need),
                                                                              dtype=dtype, budget=format_size(limit)))
    shapes = parameter_shapes(spec, vocab_size)
    for done, (name, shape) in enumerate(shapes.items(), 1):
        try:
            probe = weight(name, stand_in)
        except ScenarioError:  # already located (a missing tensor, an unreadable type)
            raise
        except ValueError as error:  # a file layout undone by reshaping (llama.cpp's tiled heads) on a wrong shape
            raise ScenarioError(str(path), None, name, cause("checkpoint.layout", shape=format_shape(shape),
                                                                why=str(error))) from None
        if not np.issubdtype(probe.dtype, np.floating):
            raise ScenarioError(str(path), None, name, cause("checkpoint.not_float", dtype=str(probe.dtype)))
        if tuple(probe.shape) != shape:
            raise ScenarioError(str(path), None, name, cause("checkpoint.shape", shape=format_shape(shape),
                                                                got=format_shape(probe.shape)))
        report(WEIGHTS, done, len(shapes))
    as_dtype = DTYPES[dtype]
    read_rows = None if rows is None else lambda name, ids: np.asarray(weight(name, rows(ids)), dtype=as_dtype)
    cache = WeightCache(lambda name: np.asarray(weight(name, load), dtype=as_dtype), limit, read_rows,
                        ROW_TABLES & shapes.keys())
    return LazyWeights(shapes, cache, identity)


def _gguf(path: Path, budget: tuple[int, str]):
    model = GGUFModel(path)
    spec = model.spec()
    tokenizer = gguf_tokenizer(model.meta, model.error)
    tokens = model.meta["tokenizer.ggml.tokens"]  # an array of strings: gguf_tokenizer checked it
    size, distinct = len(tokens), len(set(tokens))
    if distinct < size:  # each text then encodes as the last of its ids, the others only decode
        warn(str(path), "tokenizer.ggml.tokens", cause("checkpoint.repeated_tokens", repeated=size - distinct,
                                                       size=size))
    special = {"eos": token_id(model.meta, "tokenizer.ggml.eos_token_id", size, model.error), "pad": None}
    as_dtype = DTYPES[budget[1]]
    tensors = (model.stand_in, lambda name, expert=None: model.dequantized(name, as_dtype, expert))
    rows = lambda ids: lambda name: model.dequantized(name, as_dtype, ids=ids)  # noqa: E731
    _refuse_too_many(path, spec, size)
    weights = _checked(path, spec, size, lambda name, get: model.weight(name, spec, get), tensors, budget,
                       file_identity(path), rows)
    weights.quantisation = Quantisation(model, spec)
    return spec, weights, tokenizer, special


def _hf(folder: Path, budget: tuple[int, str]):
    tensors = hf.Tensors(folder)
    arch, spec, config = hf.read_spec(folder, tensors.held())
    _refuse_too_many(folder, spec, config["vocab_size"])  # before the MXFP4 pairs' check lists the experts
    tensors.packed.check(spec)
    tokenizer = _hf_tokenizer(folder / "tokenizer.json")
    identity = ";".join(file_identity(file) for file in sorted(set(tensors.files.values())))
    weights = _checked(folder, spec, config["vocab_size"], lambda name, get: hf.engine_weight(arch, spec, name, get),
                       (tensors.stand_in, tensors.load), budget, identity)
    if tensors.packed.stored():  # gpt-oss's MXFP4 experts: their blocks in the weights browser, as a GGUF file's
        weights.quantisation = hf_mxfp4.Quantisation(tensors.packed)
    special = {"eos": _single(config.get("eos_token_id")) if spec.lm_head else None,
               "pad": None if spec.lm_head else _single(config.get("pad_token_id"))}
    return spec, weights, tokenizer, special


def _hf_tokenizer(file: Path) -> Tokenizer | None:
    """The folder's tokenizer; None without tokenizer.json (ids need no tokenizer: each id's text is `#id`)."""
    if not file.exists():
        return None
    with tokenizer_errors(lambda message: ScenarioError(str(file), None, "",
                                                        cause("checkpoint.tokenizer", why=message))):
        tokenizer = Tokenizer.from_file(str(file))
    tokenizer.no_padding()
    return tokenizer


def _single(value) -> int | None:
    return value[0] if isinstance(value, list) and value else value
