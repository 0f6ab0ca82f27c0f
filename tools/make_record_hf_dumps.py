"""Write hf_generation.safetensors beside the 2026 architectures' fixtures: transformers' own greedy generation
recorded by `tinyllm_tui.record_hf`, what `check --against` reads.

    /work/refenv/bin/python tools/make_record_hf_dumps.py [ARCH …]      (none named: all of ARCHS)

Written with transformers 5.24.0 and torch 2.13.0 (CPU), in the reference environment of make_fixtures.py, on
the committed folders tests/fixtures/{qwen3_5, gemma4, deepseek_v3, qwen3_moe, gpt_oss}: each loaded as its own
fixture script loads it, under that script's float64 patches (its RMSNorm, RoPE, softmax, delta rule and router
casts), so that the dump is transformers' true float64 forward. The recording runs under
float64_reference.Float32Counter: the script stops if any operator read or wrote a float32 tensor.

Each dump holds the prompt's pass and 3 decode rounds over the first PROMPT_TOKENS ids of the fixture's own
prompt (reference.npz `ids`; the dump's metadata `ids`): every layer's residual stream, norms, projections and mixer outputs under TransformerLens's
names, and every layer's state after each pass as transformers' cache holds it — a Gated DeltaNet's
`recurrent_state` [v_head, d_k, d_v] and `conv_state` [channels, K], MLA's `cache_latent` / `cache_rope_key`
[position, width], K/V [kv_head, position, d_head] (a sliding layer's only while its cache still holds every
position), and a mixture of experts' `hook_router_logits` and `hook_topk`.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import save_file

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
sys.path[:0] = [str(ROOT), str(ROOT / "tools")]
from float64_reference import Float32Counter, counter_sees_float32  # noqa: E402

from tinyllm_tui import record_hf  # noqa: E402

NEW_TOKENS = 4  # the prompt's pass and decode rounds 1 … 3
PROMPT_TOKENS = 8  # the fixture prompt's first 8 ids: longer than every window, conv kernel and chunk, small files
ARCHS = ("qwen3_5", "gemma4", "deepseek_v3", "qwen3_moe", "gpt_oss")
VERSION = "transformers 5.24.0, torch 2.13.0 (CPU), float64"


def loaded(arch: str):
    """The fixture's model as its script loads it, after that script's float64 patches, and the context its
    passes run in."""
    folder = FIXTURES / arch
    if arch == "qwen3_5":
        import make_qwen35_fixtures as script
        import transformers

        script.pure_float64()
        model = transformers.Qwen3_5ForCausalLM.from_pretrained(folder, dtype=torch.float64,
                                                                attn_implementation="eager").eval()
        script.rebuild_rotary(model)
        return model, script._TensorFloatIsDouble()
    if arch == "gemma4":
        import make_gemma4_fixtures as script

        script.pure_float64()
        return script.load(folder), contextlib.nullcontext()
    if arch == "deepseek_v3":
        import make_deepseek_fixtures as script

        script.pure_float64()
        return script.load(folder)[0], contextlib.nullcontext()
    import make_moe_fixtures as script

    script.pure_float64()
    return script.load(arch, folder)[0], contextlib.nullcontext()


def main() -> None:
    assert counter_sees_float32()
    chosen = sys.argv[1:] or list(ARCHS)
    if unknown := set(chosen) - set(ARCHS):
        sys.exit(f"unknown fixture(s) {', '.join(sorted(unknown))} (known: {', '.join(ARCHS)})")
    for arch in chosen:
        ids = np.load(FIXTURES / arch / "reference.npz")["ids"][:PROMPT_TOKENS].tolist()
        model, context = loaded(arch)
        with context, Float32Counter() as counter:
            recorded = record_hf(model, ids, NEW_TOKENS)
        if counter.float32:
            sys.exit(f"{arch}: float32 operators in the recording: {sorted(set(counter.float32))}")
        out = FIXTURES / arch / "hf_generation.safetensors"
        save_file(recorded.arrays, out, metadata={"ids": json.dumps(ids), "written_by": f"record_hf, {VERSION}"})
        print(f"{arch}: {len(recorded.arrays)} arrays, {out.stat().st_size // 1024} KiB, {counter.ops} operators, "
              f"0 float32")


if __name__ == "__main__":
    main()
