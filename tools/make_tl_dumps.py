"""Write tests/fixtures/tl-gpt2/ and tl-llama/: reference dumps that `check --against` must agree with.

    /work/refenv/bin/python tools/make_tl_dumps.py

Needs torch, transformers ≥ 5 and transformer-lens ≥ 4 (a separate virtual environment; the project
never imports torch). For the tiny GPT-2 and Llama fixtures, in float64:

- run_with_cache.safetensors: TransformerLens's own `run_with_cache` on the prompt, every key as TL
  names it (its bridge keys too), with TL's batch axis; `TransformerBridge.boot_transformers(folder,
  hf_model=…)` boots TL ≥ 4 on a local folder. TL's Llama bridge runs transformers' RMSNorm, which
  computes in float32.
- hf_generation.safetensors: transformers itself through `tinyllm_tui.record_hf`, the prompt and 4
  decode rounds of greedy generation, with every layer's KV cache after each pass; the Llama model with
  tools/make_fixtures.py's pure-float64 patches (its RMSNorm, RoPE and softmax otherwise run in float32).

The prompt ids are the safetensors metadata `ids`; the tests need only these files.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from safetensors.numpy import save_file

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
sys.path[:0] = [str(ROOT), str(ROOT / "tools")]
from make_fixtures import pure_float64  # noqa: E402

from tinyllm_tui import record_hf  # noqa: E402
from tinyllm_tui.recorder import as_numpy  # noqa: E402

IDS = [0, 266, 222, 286, 280]
NEW_TOKENS = 5  # the prompt's pass and decode rounds 1 … 4


def load(folder: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float64, attn_implementation="eager").eval()


def tl_dump(name: str) -> None:
    from transformer_lens.model_bridge import TransformerBridge

    folder = FIXTURES / name
    bridge = TransformerBridge.boot_transformers(str(folder), hf_model=load(folder))
    with torch.no_grad():
        _, cache = bridge.run_with_cache(torch.tensor([IDS]))
    arrays = {key: as_numpy(value) for key, value in cache.items()}
    out = FIXTURES / f"tl-{name}"
    out.mkdir(exist_ok=True)
    save_file(arrays, out / "run_with_cache.safetensors", metadata={"ids": json.dumps(IDS), "source": _versions()})
    print(f"{out}/run_with_cache.safetensors: {len(arrays)} keys")


def hf_dump(name: str) -> None:
    folder = FIXTURES / name
    rec = record_hf(load(folder), IDS, NEW_TOKENS)
    out = FIXTURES / f"tl-{name}"
    out.mkdir(exist_ok=True)
    save_file(rec.arrays, out / "hf_generation.safetensors", metadata={"ids": json.dumps(IDS), "source": _versions()})
    print(f"{out}/hf_generation.safetensors: {len(rec.arrays)} keys")


def _versions() -> str:
    import transformer_lens  # noqa: F401  (its version comes from the installed metadata)
    import transformers
    from importlib.metadata import version

    return f"transformer-lens {version('transformer-lens')}, transformers {transformers.__version__}, torch {torch.__version__}"


if __name__ == "__main__":
    for fixture in ("gpt2", "llama"):
        tl_dump(fixture)
    pure_float64()  # after TransformerLens's dumps: TL users run transformers as it is
    for fixture in ("gpt2", "llama"):
        hf_dump(fixture)
