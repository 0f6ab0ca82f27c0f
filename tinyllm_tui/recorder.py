"""Record your own implementation's activations in the layout `tinyllm-tui check --against` reads.

    from tinyllm_tui import Recorder

    rec = Recorder()
    rec.prefill()                                   # the prompt's pass
    rec.record("blocks.0.attn.hook_q", q)           # [pos, head, d_head], TransformerLens's names
    rec.record("blocks.0.attn.cache_k", cache_k)    # [kv_head, position, d_head] after the pass
    rec.record("blocks.1.conv.conv_state", window)  # [K−1, channels], or transformers' [channels, K]
    rec.decode(1)                                   # decode round 1 (the first generated token fed back)
    ...
    rec.save("mine.safetensors")

Arrays may be NumPy arrays or anything with `.numpy()` or `__array__` (a PyTorch tensor, also on a GPU
or with a gradient); each is copied when recorded, so a buffer changed in place later is seen as it was.
`record_hf` does the same for a transformers model by forward hooks. Neither imports torch itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


class Recorder:
    """Arrays keyed by pass and hook name: `prefill.…`, `prefill.chunk.C.…`, `decode.N.…`, `request.R.…`."""

    def __init__(self):
        self.arrays: dict[str, np.ndarray] = {}
        self._request: int | None = None
        self._pass = "prefill"

    def request(self, index: int) -> Recorder:
        """Start request `index` (only when a scenario has several), at its prefill."""
        self._request, self._pass = index, "prefill"
        return self

    def prefill(self, chunk: int | None = None) -> Recorder:
        """The prompt's pass, or chunk `chunk` of a chunked prefill."""
        self._pass = "prefill" if chunk is None else f"prefill.chunk.{chunk}"
        return self

    def decode(self, round_: int) -> Recorder:
        """Decode round `round_` (from 1: the pass that feeds the first generated token)."""
        if round_ < 1:
            raise ValueError(f"decode rounds count from 1, got {round_}")
        self._pass = f"decode.{round_}"
        return self

    @property
    def prefix(self) -> str:
        return ("" if self._request is None else f"request.{self._request}.") + self._pass + "."

    def record(self, name: str, array: Any) -> None:
        """Keep a copy of `array` as hook `name` of the current pass."""
        key = self.prefix + name
        if key in self.arrays:
            raise ValueError(f"{key} is recorded already (call decode(n) before the next round)")
        self.arrays[key] = as_numpy(array)

    def save(self, path: str | Path) -> None:
        """Write every array recorded, as .safetensors or .npz."""
        from engine.compare.dump import save_dump

        save_dump(self.arrays, path)


def as_numpy(array: Any) -> np.ndarray:
    """A NumPy copy of a NumPy array, a PyTorch tensor (detached, on the host) or anything with __array__.
    A bfloat16 tensor becomes ml_dtypes' bfloat16 where ml_dtypes is installed, else float32 (exactly)."""
    if isinstance(array, np.ndarray):
        return array.copy()
    for method in ("detach", "cpu"):
        if callable(getattr(array, method, None)):
            array = getattr(array, method)()
    if str(getattr(array, "dtype", "")) == "torch.bfloat16":
        return _bfloat16(array)
    if callable(getattr(array, "numpy", None)):
        array = array.numpy()
    return np.array(np.asarray(array), copy=True)  # an __array__ may ignore copy=True: copy the ndarray itself


def _bfloat16(tensor: Any) -> np.ndarray:
    try:
        import ml_dtypes
    except ImportError:
        return np.array(tensor.float().numpy(), copy=True)
    return tensor.float().numpy().astype(ml_dtypes.bfloat16)


def record_hf(model: Any, ids: list[int], max_new_tokens: int = 1, recorder: Recorder | None = None) -> Recorder:
    """Greedy generation with a transformers causal LM, recording every pass: GPT-2, Llama-like (Llama, Qwen2/3,
    Mistral), LFM2, Qwen3.5 (Gated DeltaNet and gated attention), Gemma 4 (per-layer inputs, KV-shared layers),
    DeepSeek-V3 (latent attention, routing), Qwen3-MoE, gpt-oss.

    Forward hooks record what the modules compute under TransformerLens's names; the attention
    pattern comes from `output_attentions` (eager attention) and every layer's state from the model's own
    cache after each pass (README: the dump keys). Run the model in the dtype you want to compare
    (`model.double()`)."""
    from tinyllm_tui.recorder_hf import generate_recorded  # torch only once a model is given

    return generate_recorded(model, ids, max_new_tokens, recorder or Recorder())
