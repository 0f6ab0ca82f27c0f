"""Tokenizers of real checkpoints: `tokenizers` objects, their pieces as readable text, GGUF metadata.

A byte-level BPE piece such as `Ġcapital` stands for the bytes ` capital` (a SentencePiece
piece `▁capital` for the same text); a piece can also hold only part of a multi-byte character. Each id's text is its own bytes decoded: whole
characters as themselves, a partial UTF-8 sequence as `\\xe6\\x88`, control characters escaped
(`\\n`) so that one token never breaks a line on screen.
"""

from __future__ import annotations

import json
from functools import cache

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors

from engine.spec import Vocab

CONTROL, USER_DEFINED = 3, 4  # llama.cpp's token types
ESCAPES = {i: f"\\x{i:02x}" for i in (*range(32), 127)} | {9: "\\t", 10: "\\n", 13: "\\r"}
SPLITS = {  # tokenizer.ggml.pre -> a split before the byte-level regex (llama.cpp's pre-tokenizers)
    "default": None,
    "gpt-2": None,
    "smollm": r"\p{N}",  # digits one by one
}


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


def piece_texts(tokenizer: Tokenizer) -> tuple[str, ...]:
    """The text of every id, in id order (cheap enough for 150k pieces: one translate per piece)."""
    pieces = [""] * tokenizer.get_vocab_size(with_added_tokens=True)
    for piece, index in tokenizer.get_vocab(with_added_tokens=True).items():
        pieces[index] = piece
    specials = {token.content for token in tokenizer.get_added_tokens_decoder().values()}
    kinds = decoder_kinds(tokenizer)
    if "ByteLevel" in kinds:
        table = _byte_of()
        pieces = [p if p in specials else _bytes_text(p, table) for p in pieces]
    elif kinds & {"Metaspace", "Replace"}:  # SentencePiece-style: ▁ marks a space
        pieces = [p if p in specials else p.replace("▁", " ") for p in pieces]
    return tuple(p.translate(ESCAPES) for p in pieces)


def _bytes_text(piece: str, table: dict[int, str]) -> str:
    try:
        raw = piece.translate(table).encode("latin-1")
    except UnicodeEncodeError:  # not a byte-level piece after all
        return piece
    return raw.decode("utf-8", errors="backslashreplace")


def make_vocab(tokenizer: Tokenizer, eos: int | None, pad: int | None) -> Vocab:
    return Vocab(piece_texts(tokenizer), pad=pad, eos=eos)


def numbered_vocab(size: int, eos: int | None, pad: int | None) -> Vocab:
    """A checkpoint without a tokenizer, fed ids: each id's text is `#id`."""
    return Vocab(tuple(f"#{i}" for i in range(size)), pad=pad, eos=eos)


def encode(tokenizer: Tokenizer, prompt: str) -> tuple[int, ...]:
    """The ids the checkpoint's own tokenizer gives, with its special tokens (BOS, [CLS] … [SEP])."""
    return tuple(tokenizer.encode(prompt).ids)


# -- GGUF --------------------------------------------------------------------------------
def gguf_tokenizer(meta: dict, error) -> Tokenizer:
    """A byte-level BPE tokenizer from a GGUF file's `tokenizer.ggml.*` metadata.

    `error(key, message)` builds the exception for a key this cannot honour.
    """
    kind = meta.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise error("tokenizer.ggml.model", f"only byte-level BPE ('gpt2') is supported, this file has {kind!r}")
    pre = meta.get("tokenizer.ggml.pre", "default")
    if pre not in SPLITS:
        raise error("tokenizer.ggml.pre", f"unknown pre-tokenizer {pre!r} (known: {', '.join(SPLITS)})")
    tokens = list(meta["tokenizer.ggml.tokens"])
    merges = [tuple(merge.split(" ", 1)) for merge in meta.get("tokenizer.ggml.merges", [])]
    tokenizer = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    byte_split = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    split = SPLITS[pre]
    tokenizer.pre_tokenizer = byte_split if split is None else pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(split), behavior="isolated"), byte_split])
    tokenizer.decoder = decoders.ByteLevel()
    types = list(meta.get("tokenizer.ggml.token_type", []))
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False)
                                  for t, kind in zip(tokens, types) if kind == CONTROL])
    tokenizer.add_tokens([AddedToken(t, normalized=False) for t, kind in zip(tokens, types) if kind == USER_DEFINED])
    bos = meta.get("tokenizer.ggml.bos_token_id")
    if meta.get("tokenizer.ggml.add_bos_token", False) and bos is not None:
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{tokens[bos]} $A", special_tokens=[(tokens[bos], int(bos))])
    return tokenizer
