"""Write tests/fixtures/chat-qwen2 and chat-llama3: tiny instruct checkpoints with chat templates of their own.

    .venv/bin/python tools/make_chat_fixtures.py

Each is a copy of a tiny fixture (qwen2, llama3) whose tokenizer gains the special tokens its template writes,
with as many new embedding rows (seeded random, as small as the rest):

- chat-qwen2: ChatML (<|im_start|>, <|im_end|>) in tokenizer_config.json's `chat_template`, a default system
  message, `namespace`, `{% continue %}`, `raise_exception` and `tojson`; eos is <|im_end|>, as in Qwen2.5-Instruct.
- chat-llama3: Llama 3 headers (<|start_header_id|>, <|end_header_id|>, <|eot_id|>) in chat_template.jinja, which
  transformers prefers to the stale `chat_template` left in tokenizer_config.json; `bos_token`, `strftime_now`
  for a missing `date_string`, and the roles' alternation checked with `raise_exception`. Its eos stays </s>:
  a turn ends at <|eot_id|>, not at eos.

Needs only numpy, tokenizers and safetensors. tools/make_chat_goldens.py renders their templates with transformers.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file
from tokenizers import AddedToken, Tokenizer

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"

QWEN2_TEMPLATE = """\
{%- set ns = namespace(system=false) -%}
{%- for message in messages if message.role == 'system' -%}{%- set ns.system = true -%}{%- endfor -%}
{%- if not ns.system -%}
<|im_start|>system
You are a tiny test model.<|im_end|>
{% endif -%}
{%- for message in messages -%}
{%- if message.role not in ['system', 'user', 'assistant'] -%}
{{ raise_exception('unknown role ' + message.role | tojson) }}
{%- endif -%}
{%- if not message.content -%}{% continue %}{%- endif -%}
<|im_start|>{{ message.role }}
{{ message.content | trim }}<|im_end|>
{% endfor -%}
{%- if add_generation_prompt -%}
<|im_start|>assistant
{% endif -%}
"""

LLAMA3_TEMPLATE = """\
{{- bos_token }}
{%- if date_string is not defined %}
    {%- set date_string = strftime_now("%d %b %Y") %}
{%- endif %}
{%- if messages[0].role == 'system' %}
    {%- set system_message = messages[0].content | trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {%- if (message.role == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + message.content | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

# how older tokenizer_config.json files write a special token (transformers reads it as an AddedToken)
ADDED_BOS = {"__type": "AddedToken", "content": "<s>", "lstrip": False, "normalized": False, "rstrip": False,
             "single_word": False, "special": True}
STALE_TEMPLATE = "{% for message in messages %}{{ message.content }}{% endfor %}"  # chat_template.jinja wins


def make(base: str, name: str, specials: list[str], config: dict, tokenizer_config: dict,
         template_file: str | None, seed: int) -> None:
    source, out = FIXTURES / base, FIXTURES / name
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    tokenizer = Tokenizer.from_file(str(source / "tokenizer.json"))
    tokenizer.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    tokenizer.save(str(out / "tokenizer.json"))
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    weights = load_file(str(source / "model.safetensors"))
    embed = weights["model.embed_tokens.weight"]
    rows = np.random.default_rng(seed).normal(0, embed.std(), (size - embed.shape[0], embed.shape[1]))
    weights["model.embed_tokens.weight"] = np.concatenate([embed, rows.astype(embed.dtype)])
    save_file(weights, str(out / "model.safetensors"))
    settings = json.loads((source / "config.json").read_text()) | config | {"vocab_size": size}
    (out / "config.json").write_text(json.dumps(settings, indent=2) + "\n")
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")
    if template_file is not None:
        (out / "chat_template.jinja").write_text(template_file)
    print(f"wrote {out} ({size} tokens)")


def main() -> None:
    make("qwen2", "chat-qwen2", ["<|im_start|>", "<|im_end|>"], {"eos_token_id": 301},
         {"chat_template": QWEN2_TEMPLATE, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
          "bos_token": None}, None, seed=27)
    make("llama3", "chat-llama3", ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"], {},
         {"chat_template": STALE_TEMPLATE, "bos_token": ADDED_BOS, "eos_token": "</s>"},
         LLAMA3_TEMPLATE, seed=28)


if __name__ == "__main__":
    main()
