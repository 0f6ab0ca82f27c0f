"""The Recorder: keys by pass, what it accepts (NumPy, `.numpy()`, `__array__`, a tensor with a gradient on
a device), copies taken when recorded, files that `load_dump` reads back; and the package import stays
free of UI libraries and torch."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from engine.compare.dump import load_dump
from engine.layout import Key
from tinyllm_tui import Recorder
from tinyllm_tui.recorder import as_numpy


class FakeTensor:
    """What a PyTorch tensor offers the recorder: detach(), cpu(), numpy() (numpy() refuses a gradient)."""

    def __init__(self, values, grad: bool = True, device: str = "cuda"):
        self.values, self.grad, self.device = np.asarray(values), grad, device
        self.dtype = "torch.float32"

    def detach(self):
        return FakeTensor(self.values, False, self.device)

    def cpu(self):
        return FakeTensor(self.values, self.grad, "cpu")

    def numpy(self):
        if self.grad or self.device != "cpu":
            raise RuntimeError("detach() and cpu() first")
        return self.values


class ArrayLike:
    def __init__(self, values):
        self.values = values

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.values, dtype=dtype)


def test_keys_carry_the_pass_and_the_request():
    rec = Recorder()
    rec.prefill().record("hook_embed", np.zeros((3, 4)))
    rec.prefill(chunk=1).record("hook_embed", np.zeros((2, 4)))
    rec.decode(2).record("blocks.0.attn.cache_k", np.zeros((2, 6, 4)))
    rec.request(1).record("hook_embed", np.ones((3, 4)))
    rec.decode(1).record("unembed.hook_out", np.ones((1, 9)))
    assert list(rec.arrays) == ["prefill.hook_embed", "prefill.chunk.1.hook_embed", "decode.2.blocks.0.attn.cache_k",
                                "request.1.prefill.hook_embed", "request.1.decode.1.unembed.hook_out"]


def test_a_name_twice_in_one_pass_and_round_0_are_refused():
    rec = Recorder()
    rec.record("hook_embed", np.zeros(2))
    with pytest.raises(ValueError, match="prefill.hook_embed is recorded already"):
        rec.record("hook_embed", np.zeros(2))
    with pytest.raises(ValueError, match="from 1"):
        rec.decode(0)


def test_tensors_and_array_likes_become_numpy_copies():
    buffer = np.arange(6.0).reshape(2, 3)
    rec = Recorder()
    rec.record("a", buffer)
    rec.record("b", FakeTensor(buffer))
    rec.record("c", ArrayLike(buffer))
    buffer[:] = -1  # a cache buffer written in place later: the recorded values stay as they were
    for name in "abc":
        np.testing.assert_array_equal(rec.arrays[f"prefill.{name}"], np.arange(6.0).reshape(2, 3))
    assert as_numpy([1.0, 2.0]).dtype == np.float64


@pytest.mark.parametrize("suffix", [".safetensors", ".npz"])
def test_saved_files_read_back_with_their_dtypes(suffix, tmp_path):
    rec = Recorder()
    rec.record("blocks.0.attn.hook_q", np.ones((3, 2, 4), dtype=np.float16))
    rec.decode(1).record("blocks.0.attn.hook_q", np.full((1, 2, 4), 0.5))
    rec.save(tmp_path / f"mine{suffix}")
    dump = load_dump(tmp_path / f"mine{suffix}")
    assert dump.dtypes == {Key(0, "prefill", "blocks.0.attn.hook_q"): "float16",
                           Key(0, "decode.1", "blocks.0.attn.hook_q"): "float64"}
    assert dump.new_tokens() == 2
    np.testing.assert_array_equal(dump.arrays[Key(0, "decode.1", "blocks.0.attn.hook_q")], np.full((1, 2, 4), 0.5))


def test_importing_the_package_loads_no_ui_library_and_no_torch():
    code = ("import sys, tinyllm_tui; from tinyllm_tui import Recorder, record_hf; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich', 'typer', 'torch')))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"
