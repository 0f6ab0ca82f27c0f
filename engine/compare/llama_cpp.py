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
from pathlib import Path

import numpy as np

from engine.backend import Backend, to_host
from engine.compare.against import Report, compare_generation
from engine.compare.dump import LLAMA_CPP, Dump
from engine.layout import parse_key
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
    # a mixture of experts (a softmax router: qwen3moe): its logits, their softmax and the chosen experts (int32,
    # [token, k], best first), whose difference from the reference's is the first routing flip
    "ffn_moe_logits": "mlp.hook_router_logits", "ffn_moe_probs": "mlp.hook_router_scores", "ffn_moe_topk": "mlp.hook_topk",
}
CURRENT = {("Qcur", "MUL_MAT"): "attn.hook_q", ("Qcur", "ROPE"): "attn.hook_rot_q",
           ("Kcur", "MUL_MAT"): "attn.hook_k", ("Kcur", "ROPE"): "attn.hook_rot_k", ("Vcur", "MUL_MAT"): "attn.hook_v"}
CACHE_VIEWS = {"cache_k_l": "attn.cache_k", "cache_v_l": "attn.cache_v"}  # "cache_k_l0 (view) (permuted)"
GGML_DTYPES = {0: np.float32, 1: np.float16, 26: np.int32}  # ggml_type: F32, F16, I32


class _Head(ctypes.Structure):
    """The first fields of ggml's `struct ggml_tensor` (ggml.h): enough for a tensor's type, shape and strides."""

    _fields_ = [("type", ctypes.c_int32), ("buffer", ctypes.c_void_p),
                ("ne", ctypes.c_int64 * 4), ("nb", ctypes.c_size_t * 4)]


def llama_cpp_dump(path: str | Path, prompt: list[int], fed: list[int], threads: int | None = None,
                   float32_cache: bool = False) -> Dump:
    """Run `prompt` and then each token of `fed` (one decode round each) through llama.cpp.

    float32_cache: a float32 KV cache instead of llama.cpp's default float16 one."""
    try:
        import llama_cpp
        from llama_cpp._ggml import libggml
    except ImportError as error:
        raise ScenarioError(str(path), None, "--against-llama-cpp", "needs the llama-cpp-python package "
                            f"(pip install llama-cpp-python; not importable here: {error})") from None
    _declare(libggml)
    with _LlamaRun(llama_cpp, libggml, str(path), len(prompt) + len(fed), threads, float32_cache) as run:
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
    dump = llama_cpp_dump(path, list(scenario.requests[0].tokens), choices[:-1], float32_cache=float32_cache)
    return compare_generation(scenario, dump, atol, rtol, backend, states=states)


def _declare(ggml) -> None:
    ggml.ggml_get_name.restype, ggml.ggml_get_name.argtypes = ctypes.c_char_p, [ctypes.c_void_p]
    ggml.ggml_op_desc.restype, ggml.ggml_op_desc.argtypes = ctypes.c_char_p, [ctypes.c_void_p]
    ggml.ggml_nbytes.restype, ggml.ggml_nbytes.argtypes = ctypes.c_size_t, [ctypes.c_void_p]
    ggml.ggml_backend_tensor_get.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]


class _LlamaRun:
    """A llama.cpp model and context whose evaluation callback feeds a _Collector."""

    def __init__(self, lib, ggml, path: str, positions: int, threads: int | None, float32_cache: bool):
        self.lib, self.ggml = lib, ggml
        lib.llama_backend_init()
        self._quiet = lib.llama_log_callback(lambda level, text, data: None)  # kept alive: llama.cpp calls it
        lib.llama_log_set(self._quiet, None)
        self.model = lib.llama_model_load_from_file(path.encode(), lib.llama_model_default_params())
        if not self.model:
            raise ScenarioError(path, None, "", "llama.cpp could not load this GGUF file")
        heads, kv_heads = lib.llama_model_n_head(self.model), lib.llama_model_n_head_kv(self.model)
        self.collector = _Collector(ggml, heads, kv_heads, lib.llama_model_n_embd(self.model) // heads)
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

    def __init__(self, ggml, heads: int, kv_heads: int, d_head: int):
        self.ggml, self.heads, self.kv_heads, self.d_head = ggml, heads, kv_heads, d_head
        self.arrays: dict[str, np.ndarray] = {}
        self.dtypes: dict[str, str] = {}  # what llama.cpp stored: its KV cache is float16
        self.error: Exception | None = None
        self.start("prefill", 0, 0)

    def start(self, pass_: str, past: int, count: int) -> None:
        self.pass_, self.past, self.count = pass_, past, count
        self._norms: dict[str, int] = {}  # "norm-L" comes twice per layer: before attention, before the MLP

    def callback(self, tensor: int, ask: bool, user_data) -> bool:
        """ggml asks first whether a tensor is wanted (ask), then hands it over once computed."""
        try:
            name = self._hook(tensor, seen=not ask)
            if ask:
                return name is not None
            if name is not None:
                key = f"{self.pass_}.{name}"
                self.arrays[key], self.dtypes[key] = self._convert(name, self._read(tensor))
        except Exception as error:  # an exception must not cross into C: keep the first, raise after decode
            self.error = self.error or error
        return True

    def _hook(self, tensor: int, seen: bool) -> str | None:
        """The hook name of a graph tensor (None: not kept); `seen`: it is handed over now, not asked about."""
        raw = self.ggml.ggml_get_name(tensor).decode()
        for prefix, hook in CACHE_VIEWS.items():
            if raw.startswith(prefix) and raw.endswith("(view) (permuted)"):
                return f"blocks.{raw[len(prefix):].split(' ')[0]}.{hook}"
        base, _, layer = raw.rpartition("-")
        if not base or not layer.isdigit():
            base, layer = raw, None
        hook = CURRENT.get((base, self.ggml.ggml_op_desc(tensor).decode())) or NAMES.get(base)
        if base == "norm" and layer is not None:
            count = self._norms.get(raw, 0) + seen
            self._norms[raw] = count
            hook = "ln1.hook_normalized" if count <= 1 else "ln2.hook_normalized"
        return None if hook is None else hook if layer is None else f"blocks.{layer}.{hook}"

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

    def _convert(self, name: str, read: tuple[np.ndarray, str]) -> tuple[np.ndarray, str]:
        """Into the dump layout; q, k and cached k back into the half-split order of each head."""
        array, dtype = read
        return self._layout(name, array), dtype

    def _layout(self, name: str, array: np.ndarray) -> np.ndarray:
        kind = name.rsplit(".", 1)[-1]
        end = self.past + self.count
        if kind == "cache_k":  # (kv_head, cell, d_head)
            return _unpermute(array[0][:, :end])
        if kind == "cache_v":  # transposed without flash attention: (kv_head, d_head, cell)
            return np.swapaxes(array[0], 1, 2)[:, :end]
        if kind in ("hook_attn_scores", "hook_pattern"):  # (head, query, cell)
            values = array[0][:, :, :end]
            if kind == "hook_pattern":
                return values
            visible = np.arange(end)[None, :] <= np.arange(self.past, end)[:, None]
            return np.where(visible, values / np.sqrt(self.d_head), -np.inf)
        if kind in ("hook_rot_q", "hook_rot_k"):  # (pos, head, d_head)
            return _unpermute(array[0])
        values = array[0, 0]  # (pos, features)
        if kind in ("hook_q", "hook_k"):
            return _unpermute(values.reshape(values.shape[0], -1, self.d_head))
        return values


def _unpermute(x: np.ndarray) -> np.ndarray:
    """llama.cpp's per-head row order (pairs) back into the half-split order: [.., d_head] -> [.., d_head]."""
    d_head = x.shape[-1]
    return np.swapaxes(x.reshape(*x.shape[:-1], d_head // 2, 2), -1, -2).reshape(x.shape)
