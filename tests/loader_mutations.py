"""The mutants tests/fuzz_loaders.py opens: small valid fixtures with one to three edits each, made where
the format has structure, drawn from a seeded generator (`mutant(seed, index)` is always the same mutant).

GGUF: metadata (nested arrays, alignments, claimed counts, values of every type and absurd ones, dropped
keys, special ids, hostile names, duplicates), the tensor table (types, dims, offsets) and bytes (cut, flipped),
through tests/gguf_bytes.py. safetensors: header entries, names, offsets, length prefix, duplicate keys.
Hugging Face folders (one of them sharded, with MXFP4 experts): config.json values and text, tokenizer.json (no [UNK], a post-processor naming a
missing token, merges out of the vocabulary, broken regexes), a shard index that lies.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import gguf_bytes as gb

FIXTURES = Path(__file__).resolve().parent / "fixtures"
GGUF_SOURCES = ["tiny-gguf/tiny.gguf", "gguf-mixed-llama/mixed.gguf", "gguf-gemma3/gemma3.gguf",
                "gguf-mixed-qwen2/mixed.gguf", "gguf-qwen3_5/qwen35-q8_0.gguf", "gguf-lfm2/lfm2.q8_0.gguf",
                "gguf-gemma4/gemma4-q8_0.gguf", "gguf-deepseek2/model.gguf", "gguf-gpt-oss/model.gguf",
                "gguf-qwen3moe/model.gguf"]
HF_SOURCES = ["llama", "llama3", "qwen2", "gpt2", "bert", "gemma3", "phi3", "qwen3_5", "lfm2", "gemma4", "deepseek_v3",
              "gpt_oss", "qwen3_moe", "gpt_oss_mxfp4"]
OPTIONS = [["--ids", "1,2"], ["--prompt", "The cat sat"], ["--ids", "0,299"], ["--prompt", "naïve\ncafé 我"]]
COMMON = ["--max-new-tokens", "2", "--max-memory", "256M"]

HOSTILE_TEXTS = ["", "\n", "a\nb", "\r\x00\x1b]0;pwned\x07", "\x1b[2J\x1b[31m", "\u202eevil", "我" * 3, "x" * 300_000,
                 "a" * 5000 + "\n" * 50]
INTS = [0, 1, -1, 2, 3, 7, 32, 48, 255, 300, 2**16, 2**29, 2**31, 2**32 - 1, 2**63 - 1, -2**63, 2**64 - 1]
FLOATS = [0.0, -0.0, 0.5, 1e-300, 1e300, -1e300, math.nan, math.inf, -math.inf, 1.0]
INT_RANGES = {0: (0, 2**8 - 1), 1: (-2**7, 2**7 - 1), 2: (0, 2**16 - 1), 3: (-2**15, 2**15 - 1), 4: (0, 2**32 - 1),
              5: (-2**31, 2**31 - 1), 10: (0, 2**64 - 1), 11: (-2**63, 2**63 - 1)}


@dataclass
class Mutant:
    index: int
    family: str  # gguf, safetensors or folder
    edits: list[str]  # each edit's kind and what it did
    build: Callable[[Path], Path]  # writes the mutant under a folder, returns what to open
    options: list[str]


def applied(edit, rng: random.Random, *where) -> str:
    """What the edit did, or that an earlier edit removed what it edits."""
    try:
        return edit(rng, *where)
    except (ValueError, KeyError, AttributeError, TypeError, StopIteration, OSError, IndexError, RecursionError):
        return "not applicable"


# -- GGUF -------------------------------------------------------------------------------------
def random_value(rng: random.Random) -> tuple[int, object]:
    """A metadata value of a random type, from the values that broke loaders before."""
    kind = rng.choice([*INT_RANGES, 6, 12, 7, gb.STRING, gb.ARRAY])
    if kind in INT_RANGES:
        low, high = INT_RANGES[kind]
        return kind, min(max(rng.choice(INTS), low), high)
    if kind == 6:
        return kind, rng.choice([v for v in FLOATS if not math.isfinite(v) or abs(v) < 1e38])
    if kind == 12:
        return kind, rng.choice(FLOATS)
    if kind == 7:
        return kind, rng.random() < 0.5
    if kind == gb.STRING:
        return kind, rng.choice(HOSTILE_TEXTS + ["llama", "gpt2", "linear", "yarn", "32"])
    item = rng.choice([4, 6, gb.STRING, gb.ARRAY])
    items = {4: [1, 2, 32], 6: [0.5, math.nan], gb.STRING: ["a", "b c", "\n"], gb.ARRAY: [gb.Array(4, [1])]}[item]
    return gb.ARRAY, gb.Array(item, items[: rng.randint(0, 3)])


def nested(depth: int) -> gb.Raw:
    return gb.Raw(struct.pack("<IQ", gb.ARRAY, 1) * depth + struct.pack("<IQI", gb.UINT32, 1, 7))


def g_nest(rng, g):
    depth = rng.choice([2, 8, 9, 50, 1100, 5000])
    g.set(rng.choice(["x.nested", g.fields[-1][0]]), gb.ARRAY, nested(depth))
    return f"arrays nested {depth} deep"


ALIGNMENTS = [(gb.STRING, "32"), (gb.ARRAY, gb.Array(4, [32])), (4, 0), (4, 3), (4, 7), (4, 33), (4, 48), (4, 64),
              (10, 2**40), (7, True), (6, 32.0), (5, -32), (4, 16)]


def g_alignment(rng, g):
    kind, value = rng.choice(ALIGNMENTS)
    g.set("general.alignment", kind, value)
    if rng.random() < 0.5 and kind == 4 and value in (16, 64):
        g.alignment = value  # a sound file with another alignment (offsets then misaligned or not)
    return f"general.alignment {value!r}"


def g_count(rng, g):
    choice = rng.randrange(4)
    if choice == 0:
        count = rng.choice([2**29, 2**63, 2**64 - 1, len(g.get("tokenizer.ggml.tokens").items) + 1])
        g.set("tokenizer.ggml.tokens", gb.ARRAY, gb.Raw(struct.pack("<IQ", gb.STRING, count)))
        return f"tokenizer.ggml.tokens claims {count}"
    if choice == 1:
        g.counts = (rng.choice([len(g.tensors) + 1, 2**40, 2**64 - 1]), None)
        return f"tensor count {g.counts[0]}"
    if choice == 2:
        g.counts = (None, rng.choice([len(g.fields) + 1, len(g.fields) - 1, 2**40]))
        return f"field count {g.counts[1]}"
    tensor = rng.choice(g.tensors)
    tensor.dims[rng.randrange(len(tensor.dims))] = rng.choice([2**20, 2**31, 2**32, 2**63, 2**64 - 1])
    return f"tensor {tensor.name} dims {tensor.dims}"


def g_long_token(rng, g):
    tokens = g.get("tokenizer.ggml.tokens").items
    size = rng.choice([1 << 20, 5000, 0])
    tokens[rng.randrange(len(tokens))] = "a" * size
    return f"a token of {size} characters"


def g_name(rng, g):
    text = rng.choice(HOSTILE_TEXTS)
    if rng.random() < 0.5:
        tensor = rng.choice(g.tensors)
        tensor.name = tensor.name + text if rng.random() < 0.5 else text.encode() + b"\xff\xfe"
        return f"tensor renamed ({len(text)} chars)"
    i = rng.randrange(len(g.fields))
    g.fields[i] = (text, *g.fields[i][1:])
    return f"key renamed ({len(text)} chars)"


def g_duplicate(rng, g):
    if rng.random() < 0.5:
        g.fields.insert(rng.randrange(len(g.fields)), rng.choice(g.fields))
        return "a key twice"
    g.tensors.insert(rng.randrange(len(g.tensors)), rng.choice(g.tensors))
    return "a tensor twice"


def g_offset(rng, g):
    tensor, other = rng.choice(g.tensors), rng.choice(g.tensors)
    tensor.offset = min(rng.choice([other.offset, tensor.offset + rng.randint(1, 31), tensor.offset + 2**40,
                                    2**64 - 1, other.offset + 32]), 2**64 - 1)
    return f"tensor {tensor.name} offset {tensor.offset}"


def g_value(rng, g):
    i = rng.randrange(len(g.fields))
    g.fields[i] = (g.fields[i][0], *random_value(rng))
    return f"{g.fields[i][0]} = {g.fields[i][2]!r:.40}"


def g_type(rng, g):
    i = rng.randrange(len(g.fields))
    key, kind, value = g.fields[i]
    raw = gb._value(kind, value)
    g.fields[i] = (key, rng.choice([*INT_RANGES, 6, 7, 8, 9, 12, 13, 99]), gb.Raw(raw))
    return f"{key} declared type {g.fields[i][1]}"


CRITICAL = ["tokenizer.ggml.tokens", "general.architecture", "tokenizer.ggml.model", "tokenizer.ggml.scores",
            "tokenizer.ggml.merges", "tokenizer.ggml.token_type"]


def g_drop(rng, g):
    key = rng.choice(CRITICAL + [rng.choice(g.fields)[0]] * 3)
    g.drop(key)
    return f"{key} dropped"


def g_special(rng, g):
    key = rng.choice(["tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"])
    value = rng.choice([-1, -2**63, len(g.get("tokenizer.ggml.tokens").items), 2**32 - 1])
    g.set(key, 11 if value < 0 else 10, value)
    return f"{key} {value}"


def g_tensor(rng, g):
    tensor = rng.choice(g.tensors)
    if rng.random() < 0.5:
        tensor.kind = rng.randrange(45)
        return f"tensor {tensor.name} type {tensor.kind}"
    tensor.dims = rng.choice([tensor.dims[::-1], [min(d + 1, 2**64 - 1) for d in tensor.dims], [0, *tensor.dims[1:]], [*tensor.dims, 1],
                              [1] * 5, []])
    return f"tensor {tensor.name} dims {tensor.dims}"


def g_tokenizer(rng, g):
    n = len(g.get("tokenizer.ggml.tokens").items)
    key, kind, value = rng.choice([
        ("tokenizer.ggml.merges", gb.ARRAY, gb.Array(4, [1, 2])),
        ("tokenizer.ggml.merges", gb.ARRAY, gb.Array(gb.STRING, ["nospace", "a b"])),
        ("tokenizer.ggml.merges", gb.ARRAY, gb.Array(gb.STRING, ["zz\nq qq", "Ġ Ġ"])),
        ("tokenizer.ggml.token_type", gb.ARRAY, gb.Array(5, [3] * (n + 1))),
        ("tokenizer.ggml.token_type", gb.ARRAY, gb.Array(5, [3] * n)),
        ("tokenizer.ggml.scores", gb.ARRAY, gb.Array(gb.STRING, ["a"] * n)),
        ("tokenizer.ggml.scores", gb.ARRAY, gb.Array(6, [math.nan] * n)),
        ("tokenizer.ggml.model", gb.STRING, rng.choice(["bert", "", "llama", "gpt2"])),
        ("tokenizer.ggml.pre", gb.STRING, rng.choice(["nope", "qwen2", "llama-bpe"])),
        ("tokenizer.ggml.add_bos_token", 7, True),
        ("tokenizer.ggml.tokens", gb.ARRAY, gb.Array(gb.STRING, ["a"] * n)),
        ("tokenizer.ggml.tokens", gb.ARRAY, gb.Array(gb.STRING, [])),
    ])
    g.set(key, kind, value)
    return f"{key} = {value!r:.40}"


def g_absurd(rng, g):
    arch = g.get("general.architecture") if isinstance(g.get("general.architecture"), str) else "llama"
    key, kind, value = rng.choice([
        (f"{arch}.context_length", 5, -1), (f"{arch}.attention.layer_norm_rms_epsilon", 12, 1e300),
        (f"{arch}.attention.layer_norm_rms_epsilon", 6, math.nan), (f"{arch}.vocab_size", 6, math.nan),
        (f"{arch}.rope.freq_base", 6, 0.0), (f"{arch}.rope.freq_base", 12, -math.inf),
        (f"{arch}.rope.scaling.type", gb.STRING, "linear"), (f"{arch}.rope.scaling.factor", 6, math.nan),
        (f"{arch}.attention.key_length", 4, 2**31), (f"{arch}.block_count", 4, 2**31),
        (f"{arch}.attention.sliding_window", 4, 0), (f"{arch}.final_logit_softcapping", 6, -1.0),
        (f"{arch}.attention.head_count_kv", 4, 3), (f"{arch}.embedding_length", 4, 2**31),
    ])
    g.set(key, kind, value)
    return f"{key} = {value!r}"


GGUF_EDITS = {"nest": g_nest, "alignment": g_alignment, "count": g_count, "long_token": g_long_token, "name": g_name,
              "duplicate": g_duplicate, "offset": g_offset, "value": g_value, "type": g_type, "drop": g_drop,
              "special": g_special, "tensor": g_tensor, "tokenizer": g_tokenizer, "absurd": g_absurd}
BYTE_EDITS = ("truncate", "flip")


def gguf_mutant(rng: random.Random, index: int) -> Mutant:
    source = FIXTURES / rng.choice(GGUF_SOURCES)
    kinds = rng.choices([*GGUF_EDITS, *BYTE_EDITS], k=rng.randint(1, 2))
    edits = [source.parent.name]

    def build(folder: Path) -> Path:
        g = gb.parse(source.read_bytes())
        for kind in kinds:
            if kind in GGUF_EDITS:
                edits.append(f"{kind}: {applied(GGUF_EDITS[kind], rng, g)}")
        data = bytearray(gb.serialize(g))
        if "flip" in kinds:
            for _ in range(rng.randint(1, 8)):
                data[rng.randrange(min(len(data), 8192))] = rng.randrange(256)
            edits.append("flip: bytes of the header")
        if "truncate" in kinds:
            data = data[: rng.randrange(len(data))]
            edits.append(f"truncate: at {len(data)}")
        path = folder / "mutant.gguf"
        path.write_bytes(data)
        return path

    return Mutant(index, "gguf", edits, build, rng.choice(OPTIONS) + COMMON)


# -- safetensors headers ----------------------------------------------------------------------
def read_header(data: bytes) -> tuple[dict, bytes]:
    length = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8:8 + length]), data[8 + length:]


def s_name(rng, header, body):
    name = rng.choice([n for n in header if n != "__metadata__"])
    header[name + rng.choice(HOSTILE_TEXTS) if rng.random() < 0.5 else rng.choice(HOSTILE_TEXTS)] = header.pop(name)
    return "a tensor renamed", body


def s_entry(rng, header, body):
    name = rng.choice([n for n in header if n != "__metadata__"])
    field = rng.choice(["dtype", "shape", "data_offsets"])
    header[name][field] = rng.choice({
        "dtype": ["F17", "I64", "BF16", "F16", "U8", 7, None, "F8_E4M3", [], {}],
        "shape": [[], [0], [2**31, 2**31], [-1, 4], ["a"], [2**64], 5, [1] * 9],
        "data_offsets": [[0, 0], [8, 4], [0, 2**40], [-1, 8], [0], "x", [0.5, 8], [2**63, 2**64]]}[field])
    return f"{name}.{field} = {header[name][field]!r}", body


def s_offsets(rng, header, body):
    names = [n for n in header if n != "__metadata__"]
    a, b = rng.choice(names), rng.choice(names)
    header[a]["data_offsets"] = list(header[b]["data_offsets"])
    return f"{a} shares {b}'s data", body


def s_metadata(rng, header, body):
    header["__metadata__"] = rng.choice([{"a": 1}, [], "x", {"format": "pt"}, {"k": "\n" * 3}, None])
    return f"__metadata__ = {header['__metadata__']!r}", body


def s_truncate(rng, header, body):
    cut = rng.randrange(len(body) + 1)
    return f"data cut to {cut} bytes", body[:cut]


SAFETENSORS_EDITS = {"st_name": s_name, "st_entry": s_entry, "st_offsets": s_offsets, "st_metadata": s_metadata,
                     "st_truncate": s_truncate}
RAW_SAFETENSORS_EDITS = ("st_length", "st_duplicate", "st_flip")


def safetensors_mutant(rng: random.Random, index: int) -> Mutant:
    name = rng.choice(HF_SOURCES)
    kinds = rng.choices([*SAFETENSORS_EDITS, *RAW_SAFETENSORS_EDITS], k=rng.randint(1, 2))
    edits = [name]

    def build(folder: Path) -> Path:
        target = folder / name
        shutil.copytree(FIXTURES / name, target, ignore=shutil.ignore_patterns("*.npz"))
        file = target / "model.safetensors"
        if not file.exists():  # a sharded folder (gpt_oss_mxfp4): one of its shards
            index = json.loads((target / "model.safetensors.index.json").read_text())
            file = target / rng.choice(sorted(set(index["weight_map"].values())))
            edits.append(f"shard {file.name}")
        header, body = read_header(file.read_bytes())
        for kind in kinds:
            if kind in SAFETENSORS_EDITS:
                said, body = SAFETENSORS_EDITS[kind](rng, header, body)
                edits.append(f"{kind}: {said}")
        text = json.dumps(header).encode()
        if "st_duplicate" in kinds:  # JSON itself allows a key twice; safetensors must not take either silently
            first = next(n for n in header if n != "__metadata__")
            text = text[:-1] + b", " + json.dumps({first: header[first]}).encode()[1:]
            edits.append(f"st_duplicate: {first}")
        if "st_flip" in kinds:
            text = bytearray(text)
            for _ in range(rng.randint(1, 4)):
                text[rng.randrange(len(text))] = rng.randrange(256)
            text = bytes(text)
            edits.append("st_flip: header bytes")
        length = len(text)
        if "st_length" in kinds:
            length = rng.choice([0, length + 1, length - 1, 2**40, 2**63, 2**64 - 1, 7])
            edits.append(f"st_length: {length}")
        file.write_bytes(struct.pack("<Q", length) + text + body)
        return target

    return Mutant(index, "safetensors", edits, build, rng.choice(OPTIONS) + COMMON)


# -- Hugging Face folders -------------------------------------------------------------------
CONFIG_VALUES = [0, 1, -1, 3, 2**31, 2**31 + 1, 2**63 - 1, -2**63, 10**30, 0.5, 1e300, math.nan, math.inf, "", "16",
                 "silu", [], {}, [1, 2], None, True, "\n\x1b[31m"]
CONFIG_ADDITIONS = [
    ("head_dim", 2**31), ("head_dim", 3), ("sliding_window", 2), ("use_sliding_window", True),
    ("layer_types", ["sliding_attention"]), ("tie_word_embeddings", False), ("eos_token_id", [1, -2**63]),
    ("rope_scaling", {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 2.0, "high_freq_factor": 2.0,
                      "original_max_position_embeddings": 16}),
    ("rope_scaling", {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 1.0,
                      "original_max_position_embeddings": 16}),
    ("rope_scaling", {"rope_type": "linear", "factor": math.nan}), ("rope_parameters", {"rope_theta": 0.5}),
    ("rope_parameters", {"sliding_attention": "x"}), ("partial_rotary_factor", 0.5),
    ("rms_norm_eps", 1e300), ("layer_norm_eps", -0.0), ("vocab_size", math.nan), ("max_position_embeddings", 1),
    ("num_key_value_heads", 2**31), ("query_pre_attn_scalar", 0), ("max_window_layers", 2**31),
]


def h_config(rng, folder: Path) -> str:
    config = json.loads((folder / "config.json").read_text())
    choice = rng.randrange(3)
    if choice == 0:
        key = rng.choice(sorted(config))
        config[key] = rng.choice(CONFIG_VALUES)
        said = f"{key} = {config[key]!r}"
    elif choice == 1:
        key = rng.choice(sorted(config))
        del config[key]
        said = f"{key} dropped"
    else:
        key, value = rng.choice(CONFIG_ADDITIONS)
        config[key] = value
        said = f"{key} = {value!r}"
    (folder / "config.json").write_text(json.dumps(config))
    return said


def h_config_text(rng, folder: Path) -> str:
    text = (folder / "config.json").read_text()
    data, said = rng.choice([
        (text[: rng.randrange(len(text))].encode(), "cut"), (b"[1, 2]", "a list"), (b"\xff\xfe{}", "not UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000, "nested 100000 deep"), (text.replace("}", ', "a": 1e999}', 1).encode(), "1e999"),
    ])
    (folder / "config.json").write_bytes(data)
    return f"config.json {said}"


def h_tokenizer(rng, folder: Path) -> str:
    file = folder / "tokenizer.json"
    if not file.exists():
        return "no tokenizer.json"
    tokenizer = json.loads(file.read_text())
    model = tokenizer["model"]
    choice = rng.randrange(7)
    if choice == 0 and isinstance(model.get("vocab"), dict):
        unk = model.get("unk_token") or "[UNK]"
        model["vocab"].pop(unk, None)
        tokenizer["added_tokens"] = [t for t in tokenizer.get("added_tokens", []) if t["content"] != unk]
        said = f"no {unk}"
    elif choice == 1:
        tokenizer["post_processor"] = {"type": "TemplateProcessing", "pair": [], "special_tokens": {},
                                       "single": [{"SpecialToken": {"id": "[NOPE]", "type_id": 0}},
                                                  {"Sequence": {"id": "A", "type_id": 0}}]}
        said = "post-processor naming a missing token"
    elif choice == 2 and isinstance(model.get("merges"), list):
        model["merges"].append(rng.choice([["a\nb", "c"], "nospace", ["x" * 5000, "y"]]))
        said = "a merge out of the vocabulary"
    elif choice == 3:
        tokenizer["added_tokens"] = [{"id": rng.choice([-1, 2**40, 0]), "content": rng.choice(HOSTILE_TEXTS[:6]),
                                      "special": True, "single_word": False, "lstrip": False, "rstrip": False,
                                      "normalized": False}]
        said = "an added token with a strange id or text"
    elif choice == 4:
        tokenizer["pre_tokenizer"] = {"type": "Split", "pattern": {"Regex": rng.choice(["(a", "\\", "[z-a]"])},
                                      "behavior": "Isolated", "invert": False}
        said = "a broken regex"
    elif choice == 5:
        model["type"] = rng.choice(["Unigram", "WordLevel", "Nope", 7])
        said = f"model type {model['type']!r}"
    else:
        text = json.dumps(tokenizer)
        file.write_text(text[: rng.randrange(len(text))])
        return "tokenizer.json cut"
    file.write_text(json.dumps(tokenizer))
    return said


def h_index(rng, folder: Path) -> str:
    """The single file made a shard of an index that may lie about it."""
    shard = rng.choice(["model-00001-of-00001.safetensors", "model.safetensors"])
    (folder / "model.safetensors").rename(folder / shard)
    header, _ = read_header((folder / shard).read_bytes())
    names = [n for n in header if n != "__metadata__"]
    weight_map = {name: shard for name in names}
    choice = rng.randrange(6)
    if choice == 0:
        document, said = {"metadata": {}}, "no weight_map"
    elif choice == 1:
        document, said = {"weight_map": rng.choice([[], "x", None, {}])}, "weight_map not an object"
    elif choice == 2:
        weight_map[rng.choice(names)] = rng.choice(["../outside.safetensors", "/etc/hostname", "", ".", 7])
        document, said = {"weight_map": weight_map}, "a shard outside the folder"
    elif choice == 3:
        weight_map[rng.choice(names)] = "missing.safetensors"
        document, said = {"weight_map": weight_map}, "a shard that is not there"
    elif choice == 4:
        weight_map["model.not.a.tensor"] = shard
        document, said = {"weight_map": weight_map}, "a tensor its shard lacks"
    else:
        document, said = {"weight_map": weight_map}, "a sound index"
    (folder / "model.safetensors.index.json").write_text(json.dumps(document))
    return said


FOLDER_EDITS = {"config": h_config, "config_text": h_config_text, "tokenizer_json": h_tokenizer, "index": h_index}


def folder_mutant(rng: random.Random, index: int) -> Mutant:
    name = rng.choice(HF_SOURCES)
    kinds = rng.choices(list(FOLDER_EDITS), weights=[6, 1, 3, 2], k=rng.randint(1, 3))
    edits = [name]

    def build(folder: Path) -> Path:
        target = folder / name
        shutil.copytree(FIXTURES / name, target, ignore=shutil.ignore_patterns("*.npz"))
        for kind in dict.fromkeys(kinds):  # each at most once (an index is made once)
            edits.append(f"{kind}: {applied(FOLDER_EDITS[kind], rng, target)}")
        return target

    return Mutant(index, "folder", edits, build, rng.choice(OPTIONS) + COMMON)


FAMILIES = [gguf_mutant, safetensors_mutant, folder_mutant]


def mutant(seed: int, index: int) -> Mutant:
    rng = random.Random(f"{seed}:{index}")
    return FAMILIES[index % len(FAMILIES)](rng, index)
