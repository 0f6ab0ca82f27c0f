"""Write tests/data/chat_goldens.json: transformers' apply_chat_template (text and ids) for the conversations
tests/test_chat.py renders with our own template code, on SmolLM2's GGUF and the chat fixtures.

    python3 -m venv /tmp/chat-ref
    /tmp/chat-ref/bin/pip install transformers==5.24.0 tokenizers==0.23.3 jinja2==3.1.6 gguf==0.19.0 numpy
    /tmp/chat-ref/bin/python tools/make_chat_goldens.py

transformers is the reference implementation. It needs no torch to tokenize, but its GGUF reader module imports
torch at its top for tensor dtypes that reading the tokenizer's metadata never uses: a stand-in module takes
torch's place so that transformers' own reader and GGUF tokenizer converter build SmolLM2's tokenizer.
"""

from __future__ import annotations

import importlib.machinery
import json
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "data" / "chat_goldens.json"
sys.path.insert(0, str(ROOT / "tools"))
from fetch_real_models import SMOLLM2, cache_dir  # noqa: E402

QUESTION = "What is the capital of France?"
DATE = {"date_string": "26 Jul 2024"}  # the llama3 template reads today's date otherwise
CASES = {  # checkpoint -> [(messages, template variables)]
    "smollm2": [
        ([{"role": "user", "content": QUESTION}], {}),
        ([{"role": "system", "content": "You are a terse geography tutor."}, {"role": "user", "content": QUESTION}],
         {}),
        ([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
          {"role": "user", "content": "  Name a city: 我爱 café <|im_end|> ok\n"}], {}),
    ],
    "tests/fixtures/chat-qwen2": [
        ([{"role": "user", "content": "The cat sat on the mat?"}], {}),
        ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "A small model?"},
          {"role": "assistant", "content": ""}, {"role": "user", "content": "  café 我爱学习  "}], {}),
    ],
    "tests/fixtures/chat-llama3": [
        ([{"role": "user", "content": "The cat sat on the mat?"}], DATE),
        ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "A small model?"},
          {"role": "assistant", "content": "Keys and values."}, {"role": "user", "content": "café 我爱学习"}], DATE),
    ],
}


def without_torch() -> None:
    stand_in = types.ModuleType("torch")
    stand_in.__spec__ = importlib.machinery.ModuleSpec("torch", None)
    stand_in.__getattr__ = lambda name: None  # float32, bfloat16, … at the reader module's top
    sys.modules["torch"] = stand_in


def tokenizer(checkpoint: str):
    from transformers import PreTrainedTokenizerFast

    if checkpoint == "smollm2":
        return PreTrainedTokenizerFast.from_pretrained(str(cache_dir()), gguf_file=SMOLLM2)
    return PreTrainedTokenizerFast.from_pretrained(str(ROOT / checkpoint))


def main() -> None:
    without_torch()
    import transformers

    goldens = []
    for checkpoint, cases in CASES.items():
        reference = tokenizer(checkpoint)
        for messages, variables in cases:
            text = reference.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **variables)
            ids = reference.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                return_dict=False, **variables)
            goldens.append({"checkpoint": checkpoint, "messages": messages, "variables": variables, "text": text,
                            "ids": list(ids)})
    document = {"transformers": transformers.__version__, "goldens": goldens}
    OUT.write_text(json.dumps(document, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(goldens)} conversations to {OUT}")


if __name__ == "__main__":
    main()
