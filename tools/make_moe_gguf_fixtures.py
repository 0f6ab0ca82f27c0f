"""Write tests/fixtures/gguf-gpt-oss/ and gguf-qwen3moe/: tiny sparse GGUFs as llama.cpp's own converter writes them,
their experts quantized (MXFP4 for gpt-oss, Q8_0 for qwen3moe), and transformers' true float64 forward on the
weights the files decode to.

    /work/refenv/bin/python tools/make_moe_gguf_fixtures.py            # both
    /work/refenv/bin/python tools/make_moe_gguf_fixtures.py gpt-oss    # only that one

Written with transformers 5.24.0, torch 2.13.0 (CPU), gguf 0.19.0 and llama.cpp's convert_hf_to_gguf.py from the
llama-cpp-python 0.3.36 sdist (LLAMA_CPP below). For each architecture: make_moe_fixtures.py's tiny model, changed
where llama.cpp runs a file otherwise than transformers runs the folder: gpt-oss's SwiGLU limit is llama.cpp's
constant 7 (the file has no key for it; the gate and up experts are scaled by GATE_UP_SCALE so that random weights
reach it) and its YaRN ramp is truncated (llama.cpp floors and ceils its ends; gpt-oss's config says
`truncate: false`); qwen3moe has no dense layer (llama.cpp runs every layer sparse) and widths of 32 (whole quantization blocks);
RMSNorm's epsilon is the float32 the file stores. The folder is converted with
`--outtype f32` (the converter's pre-tokenizer check is told our byte-level BPE is GPT-2's), then the merged expert
tensors (ffn_gate_exps, ffn_up_exps, ffn_down_exps) are quantized with gguf-py and the file written again with every
other key and tensor as the converter wrote it. The reference: the same model with its experts replaced by gguf-py's
dequantization of the file's, through make_moe_fixtures.py's patched float64 forward (0 float32 operators); the seed
is the first from SEED whose reference has router margins of at least MIN_MARGIN. reference.npz is laid out as
make_moe_fixtures.py's.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import gguf
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_moe_fixtures as moe  # noqa: E402
from make_fixtures import OUT, PROMPT, byte_bpe, randomize  # noqa: E402

LLAMA_CPP = Path("/work/llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp")
ARCHS = {"gpt-oss": ("gpt_oss", "MXFP4"), "qwen3moe": ("qwen3_moe", "Q8_0")}  # GGUF arch -> (HF arch, expert type)
EXPERTS = ("ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight")
GATE_UP_SCALE = 5.0
CONVERT = """
import sys
import conversion.base as base
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"
def no_sentencepiece(self):  # what Qwen2's set_vocab meets without a tokenizer.model (refenv has no sentencepiece)
    raise FileNotFoundError("tokenizer.model")
base.TextModel._set_vocab_sentencepiece = no_sentencepiece
import convert_hf_to_gguf
sys.argv = ["convert_hf_to_gguf.py", sys.argv[1], "--outtype", "f32", "--outfile", sys.argv[2]]
convert_hf_to_gguf.main()
"""


def llama_cpp_config(arch: str, vocab_size: int):
    config = moe.config(arch, vocab_size)
    config.rms_norm_eps = float(np.float32(config.rms_norm_eps))  # as the file stores it
    if arch == "gpt_oss":
        config.swiglu_limit = 7.0
        config.rope_parameters = {**config.rope_parameters, "truncate": True}
    else:  # every layer sparse; widths that are whole Q8_0 blocks (32)
        config.mlp_only_layers, config.hidden_size, config.moe_intermediate_size = [], 32, 32
    return config


def convert(folder: Path, out: Path) -> None:
    env = {"PYTHONPATH": f"{LLAMA_CPP / 'gguf-py'}:{LLAMA_CPP}", "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-c", CONVERT, str(folder), str(out)], check=True, env=env, capture_output=True)


def quantize_experts(source: Path, out: Path, kind: str) -> None:
    """The file again, its merged expert tensors in `kind`, every other key and tensor as written."""
    reader = gguf.GGUFReader(source)
    writer = gguf.GGUFWriter(out, arch=reader.fields["general.architecture"].contents())
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), field.types[0], sub)
    for tensor in reader.tensors:
        data = np.array(tensor.data)
        if tensor.name.endswith(EXPERTS):
            qtype = gguf.GGMLQuantizationType[kind]
            writer.add_tensor(tensor.name, gguf.quants.quantize(data.astype(np.float32), qtype), raw_dtype=qtype)
        else:
            writer.add_tensor(tensor.name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def decoded_experts(path: Path) -> dict[str, np.ndarray]:
    """Each merged expert tensor as gguf-py dequantizes it, NumPy order (experts, rows, columns)."""
    reader = gguf.GGUFReader(path)
    return {t.name: gguf.quants.dequantize(t.data, t.tensor_type).reshape(tuple(reversed(t.shape.tolist())))
            for t in reader.tensors if t.name.endswith(EXPERTS)}


def with_decoded_experts(model, arch: str, decoded: dict[str, np.ndarray]) -> None:
    """The model's experts replaced by the file's: gpt-oss interleaves gate and up columns ([in, out] per expert),
    Qwen3-MoE stacks gate over up rows ([out, in])."""
    with torch.no_grad():
        for i, layer in enumerate(model.model.layers):
            gate, up, down = (torch.tensor(decoded[f"blk.{i}.{name}"], dtype=torch.float64) for name in EXPERTS)
            experts = layer.mlp.experts
            if arch == "gpt_oss":
                fused = torch.empty_like(experts.gate_up_proj, dtype=torch.float64)
                fused[..., 0::2], fused[..., 1::2] = gate.transpose(1, 2), up.transpose(1, 2)
                experts.gate_up_proj.copy_(fused)
                experts.down_proj.copy_(down.transpose(1, 2))
            else:
                experts.gate_up_proj.copy_(torch.cat([gate, up], dim=1))
                experts.down_proj.copy_(down)


def scale_gate_up(model) -> None:
    with torch.no_grad():
        for layer in model.model.layers:
            layer.mlp.experts.gate_up_proj.mul_(GATE_UP_SCALE)


def make(gguf_arch: str) -> None:
    arch, kind = ARCHS[gguf_arch]
    tokenizer = byte_bpe(["<|endoftext|>"])
    ids = tokenizer.encode(PROMPT).ids
    out = OUT / f"gguf-{gguf_arch}"
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        folder, converted = Path(scratch) / "hf", Path(scratch) / "f32.gguf"
        for seed in range(moe.SEED, moe.SEED + 50):
            torch.manual_seed(seed)
            model = moe.model_class(arch)(llama_cpp_config(arch, tokenizer.get_vocab_size()))
            randomize(model, seed)
            if arch == "gpt_oss":
                scale_gate_up(model)
            model.save_pretrained(folder)
            tokenizer.save(str(folder / "tokenizer.json"))
            convert(folder, converted)
            quantize_experts(converted, out / "model.gguf", kind)
            with_decoded_experts(model, arch, decoded_experts(out / "model.gguf"))
            model.save_pretrained(folder)  # the reference reads the decoded weights back as make_moe_fixtures does
            ref = moe.run(*moe.load(arch, folder), ids)
            margin = moe.smallest_margin(ref)
            print(f"seed {seed}: smallest router margin {margin:.3g}")
            if margin >= moe.MIN_MARGIN:
                break
        else:
            sys.exit("no seed gave router margins of at least MIN_MARGIN")
    ref["moe_layers"] = np.arange(len(model.model.layers))
    np.savez_compressed(out / "reference.npz", **ref)
    print(f"{gguf_arch}: {int(ref['ops'])} operators, {int(ref['float32_ops'])} in float32; greedy "
          f"{ref['greedy_ids'].tolist()}")


def main() -> None:
    moe.main(ARCHS, make)

if __name__ == "__main__":
    main()
