"""Tokenizers of real checkpoints: `tokenizers` objects, their pieces as readable text, GGUF metadata.

A byte-level BPE piece such as `Ġcapital` stands for the bytes ` capital` (a SentencePiece
piece `▁capital` for the same text); a piece can also hold only part of a multi-byte character. Each id's text is its own bytes decoded: whole
characters as themselves, a partial UTF-8 sequence as `\\xe6\\x88`, control characters escaped
(`\\n`) so that one token never breaks a line on screen.
"""

from __future__ import annotations

import json
import operator
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import cache, partial
from typing import overload

import numpy as np
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from engine.causes import cause
from engine.loading.document import ScenarioError, library_text
from engine.spec import Vocab

CONTROL, USER_DEFINED = 3, 4  # llama.cpp's token types
GEMMA = ("gemma", "gemma2", "gemma3")  # their SentencePiece files follow transformers' GemmaTokenizer
ESCAPES = {i: f"\\x{i:02x}" for i in (*range(32), 127)} | {9: "\\t", 10: "\\n", 13: "\\r"}


@cache
def _byte_of() -> dict[int, int]:
    """GPT-2's printable stand-in character for every byte, inverted: ord(char) -> byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            chars[byte] = byte
        else:
            chars[byte] = 256 + extra
            extra += 1
    return {char: chr(byte) for byte, char in chars.items()}


def decoder_kinds(tokenizer: Tokenizer) -> set[str]:
    """The decoder's type and its parts' (only the decoder is serialized, not the whole vocabulary)."""
    decoder = json.loads(tokenizer.decoder.__getstate__()) if tokenizer.decoder is not None else {}
    return {decoder.get("type")} | {d.get("type") for d in decoder.get("decoders", [])}


class PieceTexts(Sequence[str]):
    """The text of every id, in id order, each made when first read: a 151 936-entry vocabulary costs
    nothing to open, and a table labels only the few ids it shows. Ids past the tokenizer's own pieces
    (models pad their tables, e.g. Qwen2.5's 151 936 rows for 151 665 pieces) read `<unused N>`."""

    def __init__(self, tokenizer: Tokenizer, size: int | None = None):
        self._tokenizer = tokenizer
        self._pieces = tokenizer.get_vocab_size(with_added_tokens=True)
        self._size = self._pieces if size is None else size
        self._specials = {token.content for token in tokenizer.get_added_tokens_decoder().values()}
        kinds = decoder_kinds(tokenizer)
        if "ByteLevel" in kinds:
            self._text = partial(_bytes_text, table=_byte_of())
        elif kinds & {"Metaspace", "Replace"}:  # SentencePiece-style: ▁ marks a space, <0x0A> is a byte
            self._text = lambda piece: _byte_piece(piece) or piece.replace("▁", " ")
        else:
            self._text = str
        self._made: dict[int, str] = {}

    def __len__(self) -> int:
        return self._size

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[str, ...]: ...

    def __getitem__(self, index):
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(self._size)))
        index = operator.index(index)
        if not -self._size <= index < self._size:
            raise IndexError(f"token id {index} out of range for {self._size} tokens")
        index %= self._size
        text = self._made.get(index)
        if text is None:
            text = self._made[index] = self._make(index)
        return text

    def __eq__(self, other: object) -> bool:
        """Equal to any sequence of the same texts, as the tuple of them would be."""
        if not isinstance(other, Sequence) or isinstance(other, str) or len(other) != len(self):
            return False
        return (isinstance(other, PieceTexts) and other._tokenizer is self._tokenizer) or all(
            mine == theirs for mine, theirs in zip(self, other))

    def __hash__(self) -> int:
        return hash(tuple(self))

    def _make(self, index: int) -> str:
        if index >= self._pieces:
            return f"<unused {index}>"
        piece = self._tokenizer.id_to_token(index) or ""
        return (piece if piece in self._specials else self._text(piece)).translate(ESCAPES)


def _byte_piece(piece: str) -> str:
    """A byte-fallback piece's text: `<0x0A>` is a newline, `<0xE6>` part of a character (`\\xe6`)."""
    if len(piece) != 6 or not piece.startswith("<0x") or piece[-1] != ">":
        return ""
    try:
        byte = int(piece[3:5], 16)
    except ValueError:
        return ""
    return chr(byte) if byte < 128 else f"\\x{byte:02x}"


def _bytes_text(piece: str, table: dict[int, str]) -> str:
    try:
        raw = piece.translate(table).encode("latin-1")
    except UnicodeEncodeError:  # not a byte-level piece after all
        return piece
    return raw.decode("utf-8", errors="backslashreplace")


def make_vocab(tokenizer: Tokenizer, size: int, eos: int | None, pad: int | None) -> Vocab:
    """The texts of the model's `size` ids, made as they are read."""
    return Vocab(PieceTexts(tokenizer, size), pad=pad, eos=eos)


def numbered_vocab(size: int, eos: int | None, pad: int | None) -> Vocab:
    """A checkpoint without a tokenizer, fed ids: each id's text is `#id`."""
    return Vocab(tuple(f"#{i}" for i in range(size)), pad=pad, eos=eos)


class TokenizerError(ValueError):
    """tokenizers refused (its message, folded into one line)."""


@contextmanager
def tokenizer_errors(refuse: Callable[[str], Exception] = TokenizerError) -> Iterator[None]:
    """Turns what `tokenizers` raises into `refuse(its message)`: an Exception, or pyo3's PanicException
    when its Rust code panics (a BaseException, which `except Exception` lets through)."""
    try:
        with _panics_unprinted():
            yield
    except BaseException as error:
        if isinstance(error, ScenarioError) or (not isinstance(error, Exception)
                                                 and type(error).__name__ != "PanicException"):
            raise  # ours, already located; KeyboardInterrupt, SystemExit
        raise refuse(library_text(error)) from None


@contextmanager
def _panics_unprinted() -> Iterator[None]:
    """Rust's panic hook writes the panic and a backtrace straight to file descriptor 2 before pyo3 raises
    it as an exception, which carries the message: stderr goes to /dev/null meanwhile. Only on the main
    thread: on another (the TUI loads in one), the app may be drawing through fd 2, and a panic's text
    lands on its alternate screen, which goes when it ends."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    sys.stderr.flush()
    saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    os.close(null)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def encode(tokenizer: Tokenizer, prompt: str) -> tuple[int, ...]:
    """The ids the checkpoint's own tokenizer gives, with its special tokens (BOS, [CLS] … [SEP]);
    TokenizerError where the tokenizer cannot encode it (a WordPiece vocabulary without its [UNK])."""
    with tokenizer_errors():
        return tuple(tokenizer.encode(prompt).ids)


# -- GGUF --------------------------------------------------------------------------------
QWEN2_SPLIT = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPLITS = {  # tokenizer.ggml.pre -> (a split before the byte-level step, whether that step splits GPT-2's way too)
    "default": (None, True),
    "gpt-2": (None, True),
    "smollm": (r"\p{N}", True),  # digits one by one
    "qwen2": (QWEN2_SPLIT, False),  # the split replaces GPT-2's (as in transformers' GGUF loader)
    "llama-bpe": (LLAMA3_SPLIT, False),
    "llama3": (LLAMA3_SPLIT, False),
}


def gguf_tokenizer(meta: dict, error) -> Tokenizer:
    """The tokenizer a GGUF file's `tokenizer.ggml.*` metadata describes: byte-level BPE (`gpt2`) or
    SentencePiece (`llama`: byte-fallback `<0x0A>` pieces, `▁` for a space, merges from the scores).

    `error(key, message)` builds the exception for a key this cannot honour.
    """
    kind = meta.get("tokenizer.ggml.model")
    builders = {"gpt2": _byte_level, "llama": _sentencepiece, "gemma4": _gemma_sentencepiece}  # gemma4: BPE, merges
    if not isinstance(kind, str) or kind not in builders:
        raise error("tokenizer.ggml.model", cause("tok.unsupported", kind=kind, supported=", ".join(builders)))
    tokens = _token_texts(meta, error)
    types = _numbers(meta, "tokenizer.ggml.token_type", len(tokens), error)
    gemma = kind == "llama" and meta.get("general.architecture") in GEMMA
    bos = token_id(meta, "tokenizer.ggml.bos_token_id", len(tokens), error)
    build = (_gemma_sentencepiece if gemma else builders[kind])
    with tokenizer_errors(lambda message: error("tokenizer.ggml", cause("tok.cannot_build", why=message))):
        tokenizer = build(meta, tokens, error)
        tokenizer.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                                      for i in np.flatnonzero(types == CONTROL)])
        tokenizer.add_tokens([AddedToken(tokens[i], normalized=False) for i in np.flatnonzero(types == USER_DEFINED)])
        if meta.get("tokenizer.ggml.add_bos_token", kind == "llama") and bos is not None:  # llama.cpp's default
            tokenizer.post_processor = processors.TemplateProcessing(
                single=f"{tokens[bos]} $A", special_tokens=[(tokens[bos], bos)])
    return tokenizer


def _token_texts(meta: dict, error) -> list[str]:
    tokens = meta.get("tokenizer.ggml.tokens")
    if tokens is None:
        raise error("tokenizer.ggml.tokens", cause("tok.no_tokens"))
    if not isinstance(tokens, list) or not tokens or not isinstance(tokens[0], str):
        raise error("tokenizer.ggml.tokens", cause("tok.tokens"))
    return tokens


def _numbers(meta: dict, key: str, count: int, error) -> np.ndarray:
    """A per-token array of numbers (empty when the key is absent)."""
    values = meta.get(key)
    if values is None:
        return np.zeros(0)
    if not isinstance(values, np.ndarray) or len(values) != count:
        raise error(key, cause("tok.per_token", count=count))
    return values


def token_id(meta: dict, key: str, count: int, error) -> int | None:
    """A special token's id from the metadata (None when absent), refused outside the vocabulary."""
    value = meta.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < count:
        raise error(key, cause("tok.token_id", count=count - 1, value=value))
    return value


def _byte_level(meta: dict, tokens: list[str], error) -> Tokenizer:
    pre = meta.get("tokenizer.ggml.pre", "default")
    if not isinstance(pre, str) or pre not in SPLITS:
        raise error("tokenizer.ggml.pre", cause("tok.pre", pre=pre, known=", ".join(SPLITS)))
    tokenizer = Tokenizer(models.BPE(vocab=_vocab(tokens), merges=_merges(meta, error)))
    split, gpt2_regex = SPLITS[pre]
    byte_split = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=gpt2_regex)
    tokenizer.pre_tokenizer = byte_split if split is None else pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(split), behavior="isolated"), byte_split])
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def _sentencepiece(meta: dict, tokens: list[str], error) -> Tokenizer:
    """As transformers' LlamaTokenizer: BPE with byte fallback over `▁`-marked text."""
    vocab = _vocab(tokens)
    merges = _merges(meta, error) if "tokenizer.ggml.merges" in meta else _merges_from_scores(tokens, vocab, meta, error)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=True, byte_fallback=True))
    prefix = bool(meta.get("tokenizer.ggml.add_space_prefix", True))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first" if prefix else "never",
                                                       split=False)
    steps = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    tokenizer.decoder = decoders.Sequence(steps + ([decoders.Strip(content=" ", left=1)] if prefix else []))
    return tokenizer


def _gemma_sentencepiece(meta: dict, tokens: list[str], error) -> Tokenizer:
    """As transformers' GemmaTokenizer: a piece of spaces is spelled with `▁`, merges follow the file's
    order (Gemma's scores do not), every space becomes `▁` and no prefix space is added."""
    tokens = ["▁" * len(t) if " " in t and not t.strip() else t for t in tokens]
    vocab = _vocab(tokens)
    merges = _merges(meta, error) if "tokenizer.ggml.merges" in meta else _merges_by_score(tokens, vocab, -np.arange(len(tokens)))
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=True, unk_token="<unk>", byte_fallback=True))
    tokenizer.normalizer = normalizers.Replace(" ", "▁")
    tokenizer.pre_tokenizer = pre_tokenizers.Split(pattern=" ", behavior="merged_with_previous", invert=False)
    tokenizer.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    return tokenizer


def _vocab(tokens: list[str]) -> dict[str, int]:
    return {token: index for index, token in enumerate(tokens)}


def _merges(meta: dict, error) -> list[tuple[str, str]]:
    merges = meta.get("tokenizer.ggml.merges", [])
    if not isinstance(merges, list) or not all(isinstance(merge, str) and " " in merge for merge in merges):
        raise error("tokenizer.ggml.merges", cause("tok.merges"))
    return [tuple(merge.split(" ", 1)) for merge in merges]


def _merges_from_scores(tokens: list[str], vocab: dict[str, int], meta: dict, error) -> list[tuple[str, str]]:
    if "tokenizer.ggml.scores" not in meta:
        raise error("tokenizer.ggml.scores", cause("tok.scores"))
    return _merges_by_score(tokens, vocab, _numbers(meta, "tokenizer.ggml.scores", len(tokens), error))


def _merges_by_score(tokens: list[str], vocab: dict[str, int], scores: np.ndarray) -> list[tuple[str, str]]:
    """Every split of a piece into two pieces, best-scored merged piece first (transformers' generate_merges).

    Only the cuts that leave a left and a right of lengths some piece has are tried: trying every cut of
    a 1 MiB piece took minutes (each cut copies the piece), trying these few takes milliseconds."""
    sizes = {len(piece) for piece in vocab}
    lengths = sorted(sizes)
    found = []
    for piece, score in zip(tokens, scores.tolist()):
        cuts = [i for i in lengths if i < len(piece) and len(piece) - i in sizes]
        pairs = [(piece[:i], piece[i:]) for i in cuts if piece[:i] in vocab and piece[i:] in vocab]
        pairs.sort(key=lambda pair: (vocab[pair[0]], vocab[pair[1]]))
        found.extend((score, len(left), len(right), left, right) for left, right in pairs)
    found.sort(key=lambda merge: merge[:3], reverse=True)
    return [(left, right) for *_, left, right in found]
