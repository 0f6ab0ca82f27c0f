"""Write tests/fixtures/gpt_oss_mxfp4/: a tiny random gpt-oss checkpoint stored as openai/gpt-oss-20b ships its
weights, and transformers' true float64 forward of it, read through transformers' own MXFP4 dequantization.

    /work/refenv/bin/python tools/make_gptoss_mxfp4_fixture.py

Written with transformers 5.24.0 and torch 2.13.0 (CPU), the reference environment of make_fixtures.py.
The model is make_moe_fixtures.py's gpt_oss (2 layers, sliding and full, sinks, YaRN, 8 experts with biases, 2
per token, the clamped SwiGLU with a limit of 1.5) 64 wide with experts 64 wide, so that every row of an expert
holds two MXFP4 blocks. On disk, as the Hub's gpt-oss: every tensor but the experts' matrices in bfloat16; each
layer's `mlp.experts.gate_up_proj_blocks` (uint8, experts × 2f rows × d/32 blocks × 16 bytes: the rows are the
output features, gate and up interleaved, gate first) with `gate_up_proj_scales` (uint8, experts × 2f × d/32) and
`down_proj_blocks` / `down_proj_scales` (experts × d × f/32 …); two shards and model.safetensors.index.json;
config.json with `quantization_config: {quant_method: mxfp4, modules_to_not_convert: [...]}` as the Hub's.

The experts are quantized here from the random float weights: per block of 32 values along the input features,
the e8m0 shared exponent of the OCP MX format (the largest magnitude's power of two less e2m1's largest, 2; stored
biased by 127) and each value the nearest e2m1 number (±0, 0.5, 1, 1.5, 2, 3, 4, 6 times the scale), packed two
per byte, the even value in the low nibble. The script checks that transformers' `convert_moe_packed_tensors`
dequantizes those bytes to exactly the values meant, and that the model transformers loads with
`Mxfp4Config(dequantize=True)` holds them.

The reference is make_moe_fixtures.py's: its float64 patches (RMSNorm, rotary, the routers recorded, no float32
modules), the dispatch counter (0 float32 operators), the first seed from SEED whose every pass keeps a margin of
MIN_MARGIN between the 2nd and 3rd router score. reference.npz holds make_moe_fixtures.run's arrays, `moe_layers`,
`seed`, and transformers' dequantized expert EXPERT of layer LAYER (`gate_up_expert`, d × 2f; `down_expert`, f × d,
its parameter layout [in, out]), and the bytes llama.cpp's converter writes for that expert's gate (`converter_gate`,
its even rows: the converter's split) and down projection (`converter_down`) in a GGUF file (ggml's block_mxfp4:
each row's blocks of a scale byte and 16 bytes of values in ggml's nibble order).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from float64_reference import counter_sees_float32  # noqa: E402
from make_fixtures import OUT, PROMPT, byte_bpe, randomize  # noqa: E402
from make_moe_fixtures import (config, first_stable_seed, model_class, pure_float64, rebuild_yarn_rotary,  # noqa: E402
                               run)

LLAMA_CPP = Path("/work/llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp")  # its converter (conversion/gpt_oss.py)
FOLDER = OUT / "gpt_oss_mxfp4"
WIDTH = 64
LAYER, EXPERT = 1, 3
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])
QUANTIZATION = {"quant_method": "mxfp4", "modules_to_not_convert": [
    "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}  # the Hub's


def quantize(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """MXFP4 of `rows` (…, n), blocks of 32 along the last axis: (blocks …×n/32×16 uint8, scales …×n/32 uint8,
    the values they stand for)."""
    blocks = rows.reshape(*rows.shape[:-1], -1, 32)
    amax = np.abs(blocks).max(axis=-1)
    exponent = np.where(amax > 0, np.floor(np.log2(np.where(amax > 0, amax, 1))) - 2, 0)
    scale = np.exp2(exponent)[..., None]
    codes = np.abs(blocks[..., None] / scale[..., None] - E2M1).argmin(axis=-1)  # nearest; beyond 6 saturates
    packed = (codes[..., 0::2] | codes[..., 1::2] << 4).astype(np.uint8)
    return packed, (exponent + 127).astype(np.uint8), (E2M1[codes] * scale).reshape(rows.shape)


def checkpoint_tensors(model) -> tuple[dict[str, torch.Tensor], dict[str, np.ndarray]]:
    """The state dict as the Hub stores gpt-oss: bfloat16, the experts' matrices as MXFP4 blocks and scales; and
    each expert tensor's dequantized values in transformers' parameter layout (experts × in × out)."""
    tensors, meant = {}, {}
    for name, value in model.state_dict().items():
        if name.endswith(("experts.gate_up_proj", "experts.down_proj")):
            rows = value.transpose(1, 2).numpy()  # experts × out × in: the blocks run along the inputs
            blocks, scales, values = quantize(rows)
            tensors[f"{name}_blocks"], tensors[f"{name}_scales"] = torch.from_numpy(blocks), torch.from_numpy(scales)
            meant[name] = values.transpose(0, 2, 1)
        else:
            tensors[name] = value.to(torch.bfloat16)
    return tensors, meant


def check_quantizer(tensors: dict[str, torch.Tensor], meant: dict[str, np.ndarray]) -> None:
    """transformers' own dequantization of the bytes gives exactly the values meant."""
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    for name, values in meant.items():
        theirs = convert_moe_packed_tensors(tensors[f"{name}_blocks"], tensors[f"{name}_scales"], dtype=torch.float64)
        assert np.array_equal(theirs.numpy(), values), name


def write(folder: Path, model, tensors: dict[str, torch.Tensor]) -> None:
    """Two shards (the embedding and layer 0; the rest) with their index, and config.json as the Hub's."""
    folder.mkdir(parents=True, exist_ok=True)
    first = {n for n in tensors if n.startswith(("model.embed_tokens", "model.layers.0."))}
    shards = {"model-00001-of-00002.safetensors": sorted(first),
              "model-00002-of-00002.safetensors": sorted(set(tensors) - first)}
    for file, names in shards.items():
        save_file({n: tensors[n].contiguous() for n in names}, str(folder / file), metadata={"format": "pt"})
    index = {"metadata": {"total_size": sum(t.numel() * t.element_size() for t in tensors.values())},
             "weight_map": {n: file for file, names in shards.items() for n in names}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    settings = model.config.to_diff_dict() | {"architectures": ["GptOssForCausalLM"], "dtype": "bfloat16",
                                        "quantization_config": QUANTIZATION}
    (folder / "config.json").write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n")


def load_dequantized(folder: Path):
    """The folder through transformers' MXFP4 loading, dequantized to float64, patched as make_moe_fixtures.load."""
    from transformers import Mxfp4Config

    model = model_class("gpt_oss").from_pretrained(folder, dtype=torch.float64, attn_implementation="eager",
                                                   experts_implementation="eager",
                                                   quantization_config=Mxfp4Config(dequantize=True)).eval()
    rebuild_yarn_rotary(model)
    routers = [layer.mlp.router for layer in model.model.layers]
    for router in routers:
        router.seen = []
    return model, routers


def converter_repack(blocks: torch.Tensor, scales: torch.Tensor) -> np.ndarray:
    """The bytes llama.cpp's converter writes for these MXFP4 blocks in a GGUF file (GptOssModel.repack_mxfp4: its
    nibble transform, the scale byte first), caught at its writer."""
    sys.path[:0] = [str(LLAMA_CPP / "gguf-py"), str(LLAMA_CPP)]
    from conversion.gpt_oss import GptOssModel

    written = []
    writer = type("Writer", (), {"add_tensor": lambda _self, _name, data, raw_dtype: written.append(data)})()
    converter = type("Converter", (), {"gguf_writer": writer,
                                       "transform_nibble_layout": GptOssModel.transform_nibble_layout})()
    GptOssModel.repack_mxfp4(converter, "ffn", blocks, scales)
    return written[0]


def main() -> None:
    assert counter_sees_float32()
    pure_float64()
    tokenizer = byte_bpe(["<|endoftext|>"])
    ids = tokenizer.encode(PROMPT).ids
    settings = config("gpt_oss", tokenizer.get_vocab_size())
    settings.hidden_size = settings.intermediate_size = WIDTH
    kept = {}

    def reference(seed: int) -> dict[str, np.ndarray]:
        torch.manual_seed(seed)
        model = model_class("gpt_oss")(settings)
        randomize(model, seed)
        kept["tensors"], meant = checkpoint_tensors(model)
        check_quantizer(kept["tensors"], meant)
        write(FOLDER, model, kept["tensors"])
        dequantized, routers = load_dequantized(FOLDER)
        kept["experts"] = [layer.mlp.experts for layer in dequantized.model.layers]
        for layer, module in enumerate(kept["experts"]):
            for name in ("gate_up_proj", "down_proj"):
                loaded = getattr(module, name).detach().numpy()
                assert np.array_equal(loaded, meant[f"model.layers.{layer}.mlp.experts.{name}"]), (layer, name)
        return run(dequantized, routers, ids)

    seed, ref = first_stable_seed(reference)
    tensors, experts = kept["tensors"], kept["experts"]
    tokenizer.save(str(FOLDER / "tokenizer.json"))
    sample, packed = experts[LAYER], {k: v for k, v in tensors.items() if f"layers.{LAYER}.mlp.experts." in k}
    gate_up = [packed[f"model.layers.{LAYER}.mlp.experts.gate_up_proj{s}"] for s in ("_blocks", "_scales")]
    down = [packed[f"model.layers.{LAYER}.mlp.experts.down_proj{s}"] for s in ("_blocks", "_scales")]
    ref |= {"moe_layers": np.arange(len(experts)), "seed": np.array(seed),
            "gate_up_expert": sample.gate_up_proj[EXPERT].detach().numpy(),
            "down_expert": sample.down_proj[EXPERT].detach().numpy(),
            "sample_layer": np.array(LAYER), "sample_expert": np.array(EXPERT),
            "converter_gate": converter_repack(*(t[:, ::2] for t in gate_up))[EXPERT],  # as its gate/up split
            "converter_down": converter_repack(*down)[EXPERT]}
    np.savez_compressed(FOLDER / "reference.npz", **ref)
    print(f"gpt_oss_mxfp4: {int(ref['ops'])} operators dispatched, {int(ref['float32_ops'])} read or wrote float32; "
          f"greedy {ref['greedy_ids'].tolist()}")


if __name__ == "__main__":
    main()
