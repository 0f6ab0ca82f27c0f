"""The words of the loaders' causes (engine/causes.py: LOADING), per language: why a scenario, a weight file, a
checkpoint, a tokenizer or a dump is refused. The English is the CLI's, word for word.

A part of the catalogue (tinyllm_tui.tui.i18n merges it under `cause.CODE`, as it does i18n_causes), one dict per
language, grouped by the loader that refuses. A library's own words (PyYAML's, tokenizers', the system's) are a
fact, never translated.
"""

from __future__ import annotations

EN = {
    # what a YAML value is
    "value.nothing": "nothing", "value.boolean": "boolean {value}", "value.number": "number {value}",
    "value.text": "text {value!r}", "value.text_long": "text {start!r}… ({length} characters)",
    "value.mapping": "a mapping", "value.list": "a list", "value.other": "{name}",
    # a YAML document
    "doc.unreadable": "cannot read ({why})",
    "doc.too_big": "larger than the {mib} MiB a scenario file may hold; put big weights in a weight file "
                   "(weights: {{file: model.safetensors}})",
    "doc.not_text": "not UTF-8 text (byte {byte})",
    "doc.too_many_values": "holds up to {values} values, more than the {limit} a scenario file may (each takes ~300 "
                           "bytes to parse); put big weights in a weight file (weights: {{file: model.safetensors}})",
    "doc.yaml_syntax": "YAML syntax: {problem}",
    "doc.yaml_unclosed": "YAML syntax: {context}: {problem}",
    "doc.yaml_opened": "YAML syntax: {problem} ({within} opened at line {line})",
    "doc.yaml_character": "YAML: character #x{character} is not allowed ({reason})",
    "doc.yaml": "YAML: {problem}",
    "doc.duplicate_key": "this key appears twice",
    "doc.mapping": "expected a mapping, got {got}",
    "doc.unknown_key": "unknown key (expected one of: {keys})",
    "doc.missing_key": "missing required key {key!r}",
    "doc.list": "expected a list, got {got}",
    "doc.number": "expected a number, got {got}",
    "doc.finite": "expected a finite number, got {value}",
    "doc.integer": "expected an integer, got {got}",
    "doc.integer_min": "expected an integer ≥ {minimum}, got {value}",
    "doc.boolean": "expected true or false, got {got}",
    "doc.text": "expected text, got {got}",
    "doc.choice": "expected one of {options}, got {value!r}",
    "doc.tag": "tag {tag} is not allowed: a scenario holds plain data only",
}

ZH = {
    "value.nothing": "空值", "value.boolean": "布尔值 {value}", "value.number": "数字 {value}",
    "value.text": "文本 {value!r}", "value.text_long": "文本 {start!r}…（共 {length} 个字符）",
    "value.mapping": "一个映射", "value.list": "一个列表", "value.other": "{name}",
    "doc.unreadable": "无法读取（{why}）",
    "doc.too_big": "超过了场景文件允许的 {mib} MiB；请把大的权重放进权重文件（weights: {{file: model.safetensors}}）",
    "doc.not_text": "不是 UTF-8 文本（第 {byte} 个字节）",
    "doc.too_many_values": "含有多达 {values} 个值，超过了场景文件允许的 {limit} 个（每个解析时约占 300 字节）；"
                           "请把大的权重放进权重文件（weights: {{file: model.safetensors}}）",
    "doc.yaml_syntax": "YAML 语法错误：{problem}",
    "doc.yaml_unclosed": "YAML 语法错误：{context}：{problem}",
    "doc.yaml_opened": "YAML 语法错误：{problem}（{within} 起始于第 {line} 行）",
    "doc.yaml_character": "YAML：不允许字符 #x{character}（{reason}）",
    "doc.yaml": "YAML：{problem}",
    "doc.duplicate_key": "这个键出现了两次",
    "doc.mapping": "应为映射，实际是{got}",
    "doc.unknown_key": "未知的键（应为以下之一：{keys}）",
    "doc.missing_key": "缺少必需的键 {key!r}",
    "doc.list": "应为列表，实际是{got}",
    "doc.number": "应为数字，实际是{got}",
    "doc.finite": "应为有限的数字，实际是 {value}",
    "doc.integer": "应为整数，实际是{got}",
    "doc.integer_min": "应为 ≥ {minimum} 的整数，实际是 {value}",
    "doc.boolean": "应为 true 或 false，实际是{got}",
    "doc.text": "应为文本，实际是{got}",
    "doc.choice": "应为 {options} 之一，实际是 {value!r}",
    "doc.tag": "不允许标签 {tag}：场景只能包含纯数据",
}
