"""llama.cpp's own evaluation of a GGUF file as a dump (`check MODEL.gguf --against-llama-cpp`).

Where llama-cpp-python is installed, the prompt and the decode rounds run through llama.cpp itself;
its evaluation callback (`cb_eval`) hands over every tensor of the graph as a raw `ggml_tensor *`.
llama-cpp-python defines no ggml_tensor struct, so the head of its layout (type, buffer, ne[4], nb[4])
and `ggml_backend_tensor_get` come from the bundled ggml library. The tensors are converted into the
dump layout of engine.layout, so the comparison with the float64 reference is the one of
`check --against`: per pass and operator, how far llama.cpp's quantized kernels (and its float16 KV
cache) drift.

- llama.cpp's converter permutes the rows of attn_q / attn_k per head for its RoPE layout; q, k and
  the K cache are permuted back into the half-split order the engine (and transformers) use.
- Flash attention is switched off, so that the scores (`kq`, before the scale and the mask) and the
  pattern (`kq_soft_max`) exist; every token of a pass is an output, so no layer is pruned to the last row.
- Decode rounds feed the reference's own greedy choices (teacher forcing), so every pass meets its
  counterpart even where llama.cpp's logits would choose another token.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.backend import Backend
from engine.arrays import to_host
from engine.compare.against import Report, compare_generation
from engine.compare.dump import LLAMA_CPP, Dump
from engine.hooks import Hook
from engine.layout import Key, parse_key
from engine.causes import cause
from engine.loading.document import ScenarioError
from engine.scenario import Scenario
from engine.session import Session
from engine.trace import OpKind

NAMES = {  # llama.cpp's graph names (before "-L") -> hook names
    "embd": "hook_embed", "attn_norm": "ln1.hook_out", "kqv_out": "attn.hook_z", "attn_out": "hook_attn_out",
    "ffn_inp": "hook_resid_mid", "ffn_norm": "ln2.hook_out", "ffn_gate": "mlp.hook_pre",
    "ffn_up": "mlp.hook_pre_linear", "ffn_swiglu": "mlp.hook_post", "ffn_out": "hook_mlp_out",
    "l_out": "hook_resid_post", "norm": "ln_final.hook_normalized", "result_norm": "ln_final.hook_out",
    "result_output": "unembed.hook_out", "kq": "attn.hook_attn_scores", "kq_soft_max": "attn.hook_pattern",
    "Qcur_normed": "attn.hook_q_normed", "Kcur_normed": "attn.hook_k_normed",
    # a mixture of experts: its logits, the chosen experts (int32, [token, k], best first; their difference from the
    # reference's is the first routing flip), the chosen experts' weights and the weighted sum
    "ffn_moe_logits": "mlp.hook_router_logits", "ffn_moe_topk": "mlp.hook_topk", "ffn_moe_out": "hook_mlp_out",
    "ffn_moe_weights_norm": "mlp.hook_topk_weights", "ffn_moe_weights_softmax": "mlp.hook_topk_weights",
}
ARCH_NAMES = {"gpt-oss": {"attn_post_norm": "ln2.hook_out"}}  # its RMSNorm before the experts
CURRENT = {  # names llama.cpp gives several tensors, told apart by the operator that made each
    ("Qcur", "MUL_MAT"): "attn.hook_q", ("Qcur", "ROPE"): "attn.hook_rot_q", ("Kcur", "MUL_MAT"): "attn.hook_k",
    ("Kcur", "ROPE"): "attn.hook_rot_k", ("Vcur", "MUL_MAT"): "attn.hook_v",
    ("Qcur", "ADD"): "attn.hook_q", ("Kcur", "ADD"): "attn.hook_k", ("Vcur", "ADD"): "attn.hook_v",  # + a bias
    # a softmax (or sigmoid) router's scores; gpt-oss's router has none: its "probs" are the logits plus the bias
    ("ffn_moe_probs", "SOFT_MAX"): "mlp.hook_router_scores", ("ffn_moe_probs", "SIGMOID"): "mlp.hook_router_scores",
    ("ffn_moe_probs", "ADD"): "mlp.hook_router_logits"}
PENDING = "(norm)"  # a layer's RMSNorm before its gain: named by the tensor after it, one of NORMED
NORMED = {"attn_norm": "ln1", "ffn_norm": "ln2", "Qcur_normed": "attn.q_norm", "Kcur_normed": "attn.k_norm"}
QK_NORMED = {("hook_normalized", NORMED[base]) for base in ("Qcur_normed", "Kcur_normed")}  # (pos, head, d_head)
CACHE_VIEWS = {"cache_k_l": "attn.cache_k", "cache_v_l": "attn.cache_v"}  # "cache_k_l0 (view) (permuted)"
GGML_DTYPES = {0: np.float32, 1: np.float16, 26: np.int32}  # ggml_type: F32, F16, I32


@dataclass(frozen=True)
class Geometry:
    """What turns llama.cpp's tensors into the dump layout: heads, the layers' sliding windows (None: full), each
    layer's sink logits (gpt-oss), and whether the converter permuted q/k rows into pairs (llama.cpp's "normal"
    RoPE, as for llama; the NEOX RoPE of Qwen and gpt-oss keeps transformers' half-split order)."""

    heads: int
    kv_heads: int
    d_head: int
    pairs: bool
    windows: tuple[int | None, ...] = ()
    sinks: dict[int, np.ndarray] = field(default_factory=dict)
    arch: str = ""


class _Head(ctypes.Structure):
    """The first fields of ggml's `struct ggml_tensor` (ggml.h): enough for a tensor's type, shape and strides."""

    _fields_ = [("type", ctypes.c_int32), ("buffer", ctypes.c_void_p),
                ("ne", ctypes.c_int64 * 4), ("nb", ctypes.c_size_t * 4)]


def llama_cpp_dump(path: str | Path, prompt: list[int], fed: list[int], threads: int | None = None,
                   float32_cache: bool = False, windows: tuple[int | None, ...] = ()) -> Dump:
    """Run `prompt` and then each token of `fed` (one decode round each) through llama.cpp.

    float32_cache: a float32 KV cache instead of llama.cpp's default float16 one. windows: each layer's sliding
    window (None: full attention), to mask the scores as the engine writes them (llama.cpp hands them over unmasked)."""
    try:
        import llama_cpp
        from llama_cpp._ggml import libggml
    except ImportError as error:
        raise ScenarioError(str(path), None, "--against-llama-cpp", cause("llamacpp.missing", why=str(error))) from None
    _declare(libggml)
    with _LlamaRun(llama_cpp, libggml, str(path), len(prompt) + len(fed), threads, float32_cache, windows) as run:
        run.feed(prompt, 0)
        for round_, token in enumerate(fed, 1):
            run.feed([token], round_)
        return collected(path, run.collector)


def collected(path: str | Path, collector: _Collector) -> Dump:
    """What a collector kept, as a dump."""
    arrays, dtypes = collector.arrays, collector.dtypes
    return Dump(f"{LLAMA_CPP}{path}", {parse_key(k): a for k, a in arrays.items()},
                {parse_key(k): d for k, d in dtypes.items()})


def compare_with_llama_cpp(scenario: Scenario, path: str | Path, atol: float | None = None,
                           rtol: float | None = None, backend: Backend | None = None,
                           float32_cache: bool = False) -> Report:
    """The first request through the engine and through llama.cpp (fed the engine's greedy choices)."""
    states = [s for s in Session(scenario, backend).steps() if s.request == 0]
    choices = [int(to_host(s.values)[0, 0]) for s in states if s.kind == OpKind.CHOICE]
    windows = tuple(block.window for block in scenario.model.blocks)
    dump = llama_cpp_dump(path, list(scenario.requests[0].tokens), choices[:-1], float32_cache=float32_cache,
                          windows=windows)
    return compare_generation(scenario, dump, atol, rtol, backend, states=states)


def _declare(ggml) -> None:
    ggml.ggml_get_name.restype, ggml.ggml_get_name.argtypes = ctypes.c_char_p, [ctypes.c_void_p]
    ggml.ggml_op_desc.restype, ggml.ggml_op_desc.argtypes = ctypes.c_char_p, [ctypes.c_void_p]
    ggml.ggml_nbytes.restype, ggml.ggml_nbytes.argtypes = ctypes.c_size_t, [ctypes.c_void_p]
    ggml.ggml_backend_tensor_get.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]


def _meta(lib, model, key: str) -> str | None:
    """A metadata value of the loaded model as llama.cpp reads it (None: no such key)."""
    buffer = ctypes.create_string_buffer(256)
    size = lib.llama_model_meta_val_str(model, key.encode(), buffer, len(buffer))
    return buffer.value.decode() if size >= 0 else None


def _sinks(path: str, layers: int) -> dict[int, np.ndarray]:
    """gpt-oss's per-head sink logits, which llama.cpp adds to each softmax's denominator (attn_sinks in the file)."""
    import gguf

    tensors = {t.name: t for t in gguf.GGUFReader(path).tensors}
    return {layer: np.asarray(tensors[f"blk.{layer}.attn_sinks.weight"].data, dtype=np.float32)
            for layer in range(layers) if f"blk.{layer}.attn_sinks.weight" in tensors}


class _LlamaRun:
    """A llama.cpp model and context whose evaluation callback feeds a _Collector."""

    def __init__(self, lib, ggml, path: str, positions: int, threads: int | None, float32_cache: bool,
                 windows: tuple[int | None, ...]):
        self.lib, self.ggml = lib, ggml
        lib.llama_backend_init()
        self._quiet = lib.llama_log_callback(lambda level, text, data: None)  # kept alive: llama.cpp calls it
        lib.llama_log_set(self._quiet, None)
        self.model = lib.llama_model_load_from_file(path.encode(), lib.llama_model_default_params())
        if not self.model:
            raise ScenarioError(path, None, "", cause("llamacpp.cannot_load"))
        self.collector = _Collector(ggml, self._geometry(path, windows))
        self._callback = lib.ggml_backend_sched_eval_callback(self.collector.callback)
        params = lib.llama_context_default_params()
        params.n_ctx = params.n_batch = params.n_ubatch = max(256, positions)  # one graph per pass
        params.n_threads = params.n_threads_batch = threads or min(os.cpu_count() or 1, 4)
        params.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
        if float32_cache:
            params.type_k = params.type_v = lib.GGML_TYPE_F32
        params.cb_eval, params.cb_eval_user_data = self._callback, None
        self.context = lib.llama_init_from_model(self.model, params)
        self.past = 0

    def _geometry(self, path: str, windows: tuple[int | None, ...]) -> Geometry:
        lib, model = self.lib, self.model
        arch = _meta(lib, model, "general.architecture") or ""
        heads = lib.llama_model_n_head(model)
        d_head = int(_meta(lib, model, f"{arch}.attention.key_length") or lib.llama_model_n_embd(model) // heads)
        return Geometry(heads, lib.llama_model_n_head_kv(model), d_head,
                        lib.llama_model_rope_type(model) == lib.LLAMA_ROPE_TYPE_NORM, windows,
                        _sinks(path, lib.llama_model_n_layer(model)), arch)

    def __enter__(self) -> _LlamaRun:
        return self

    def __exit__(self, *exc) -> None:
        self.lib.llama_free(self.context)
        self.lib.llama_model_free(self.model)

    def feed(self, tokens: list[int], round_: int) -> None:
        """One pass: every token an output row, at positions past … past + len − 1."""
        batch = self.lib.llama_batch_init(len(tokens), 0, 1)
        try:
            for i, token in enumerate(tokens):
                batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = token, self.past + i, 1, 1
                batch.seq_id[i][0] = 0
            batch.n_tokens = len(tokens)
            self.collector.start(f"decode.{round_}" if round_ else "prefill", self.past, len(tokens))
            status = self.lib.llama_decode(self.context, batch)
        finally:
            self.lib.llama_batch_free(batch)
        if self.collector.error is not None:
            raise self.collector.error
        if status != 0:
            raise RuntimeError(f"llama_decode returned {status}")
        self.past += len(tokens)


class _Collector:
    """Turns the tensors of one pass into dump arrays named `PASS.HOOK`."""

    def __init__(self, ggml, geometry: Geometry):
        self.ggml, self.geometry = ggml, geometry
        self.names = NAMES | ARCH_NAMES.get(geometry.arch, {})
        self.normed = NORMED | {base: Hook.parse(hook).module for base, hook in ARCH_NAMES.get(geometry.arch, {}).items()}
        self.arrays: dict[str, np.ndarray] = {}
        self.dtypes: dict[str, str] = {}  # what llama.cpp stored: its KV cache is float16
        self.error: Exception | None = None
        self.start("prefill", 0, 0)

    def start(self, pass_: str, past: int, count: int) -> None:
        self.pass_, self.past, self.count = pass_, past, count
        self._norm: dict[int, tuple[np.ndarray, str]] = {}  # layer -> its last RMSNorm before the gain

    def callback(self, tensor: int, ask: bool, user_data) -> bool:
        """ggml asks first whether a tensor is wanted (ask), then hands it over once computed."""
        try:
            raw = self.ggml.ggml_get_name(tensor).decode()
            hook = self._hook(raw, self.ggml.ggml_op_desc(tensor).decode())
            if ask:
                return hook is not None
            if hook is not None:
                self._keep(raw, hook, self._read(tensor))
        except Exception as error:  # an exception must not cross into C: keep the first, raise after decode
            self.error = self.error or error
        return True

    def _hook(self, raw: str, op: str) -> Hook | None:
        """The hook of a graph tensor (None: not kept). A layer's "norm-L" (an RMSNorm before its gain) is
        kept until the tensor after it says which norm it was (attn_norm-L: ln1, Qcur_normed-L: the q norm…)."""
        for prefix, local in CACHE_VIEWS.items():  # llama.cpp's own names: "cache_k_l0 (view) (permuted)"
            if raw.startswith(prefix) and raw.endswith("(view) (permuted)"):
                return Hook.within(int(raw[len(prefix):].split(" ")[0]), local)
        base, _, layer = raw.rpartition("-")
        if not base or not layer.isdigit():
            local = CURRENT.get((raw, op)) or self.names.get(raw)
            return None if local is None else Hook.parse(local)
        if base == "norm":
            return Hook(int(layer), "", PENDING)
        local = CURRENT.get((base, op)) or self.names.get(base)
        return None if local is None else Hook.within(int(layer), local)

    def _keep(self, raw: str, hook: Hook, read: tuple[np.ndarray, str]) -> None:
        base = raw.rpartition("-")[0]
        if hook.name == PENDING:  # a layer's "norm-L": named by its successor
            self._norm[hook.layer] = read
            return
        self._store(hook, read)
        if base in self.normed and hook.layer in self._norm:
            self._store(Hook(hook.layer, self.normed[base], "hook_normalized"), self._norm.pop(hook.layer))

    def _store(self, hook: Hook, read: tuple[np.ndarray, str]) -> None:
        array, dtype = read
        key = Key(0, self.pass_, hook.text).text()
        self.arrays[key], self.dtypes[key] = self._layout(hook, array), dtype

    def _read(self, tensor: int) -> tuple[np.ndarray, str]:
        """The tensor as a 4-D float32 array (ne3, ne2, ne1, ne0), strides as ggml lays it out, and its dtype."""
        head = ctypes.cast(tensor, ctypes.POINTER(_Head)).contents
        if head.type not in GGML_DTYPES:
            raise ValueError(f"{self.ggml.ggml_get_name(tensor).decode()}: ggml type {head.type} is not float or int32")
        size = self.ggml.ggml_nbytes(tensor)
        raw = (ctypes.c_uint8 * size)()
        self.ggml.ggml_backend_tensor_get(tensor, raw, 0, size)
        array = np.ndarray(tuple(reversed(head.ne)), GGML_DTYPES[head.type], buffer=raw,
                           strides=tuple(reversed(head.nb)))
        return array.astype(np.float32), np.dtype(GGML_DTYPES[head.type]).name

    def _layout(self, hook: Hook, array: np.ndarray) -> np.ndarray:
        """Into the dump layout; q, k and cached k back into the half-split order of each head where the converter
        permuted them (llama.cpp's own layouts: its V cache is transposed)."""
        kind, layer = hook.name, hook.layer
        end = self.past + self.count
        if kind == "cache_k":  # (kv_head, cell, d_head)
            return self._order(array[0][:, :end])
        if kind == "cache_v":  # transposed without flash attention: (kv_head, d_head, cell)
            return np.swapaxes(array[0], 1, 2)[:, :end]
        if kind in ("hook_attn_scores", "hook_pattern"):  # (head, query, cell)
            return self._attention(kind, layer, array[0][:, :, :end])
        if kind in ("hook_rot_q", "hook_rot_k"):  # (pos, head, d_head)
            return self._order(array[0])
        if kind in ("hook_q_normed", "hook_k_normed") or (kind, hook.module) in QK_NORMED:  # (pos, head, d_head)
            return self._order(array[0]).reshape(array.shape[1], -1)
        # (pos, features): [features, tokens] as most are, or [.., .., tokens] (the experts' weights: [1, k, tokens])
        values = array[0].reshape(self.count, -1) if array.shape[1] == self.count else array[0, 0]
        if kind in ("hook_q", "hook_k"):
            return self._order(values.reshape(values.shape[0], -1, self.geometry.d_head))
        return values

    def _attention(self, kind: str, layer: int, values: np.ndarray) -> np.ndarray:
        """The scores scaled and masked as the engine writes them (−∞ where a query may not look, its window
        included), the pattern as it is; gpt-oss's sink as a last column (its logit; its probability: what the
        keys leave)."""
        end, sinks = self.past + self.count, self.geometry.sinks.get(layer)
        keys, queries = np.arange(end)[None, :], np.arange(self.past, end)[:, None]
        window = self.geometry.windows[layer] if layer < len(self.geometry.windows) else None
        visible = (keys <= queries) & (keys > queries - window if window else True)
        if kind == "hook_pattern":
            sink = 1 - values.sum(axis=-1, keepdims=True)
        else:
            values = np.where(visible, values / np.sqrt(self.geometry.d_head), -np.inf)
            sink = None if sinks is None else np.broadcast_to(sinks[:, None, None], (*values.shape[:2], 1))
        return values if sinks is None else np.concatenate([values, sink], axis=-1)

    def _order(self, x: np.ndarray) -> np.ndarray:
        """llama.cpp's per-head row order (pairs) back into the half-split order: [.., d_head] -> [.., d_head]."""
        if not self.geometry.pairs:
            return x
        d_head = x.shape[-1]
        return np.swapaxes(x.reshape(*x.shape[:-1], d_head // 2, 2), -1, -2).reshape(x.shape)
