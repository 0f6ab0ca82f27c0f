"""The X01 seed tables as `expect:` entries of scenarios/x01.yaml, numbers as printed.

    python tests/data/x01_expectations.py --write   # rewrite the expect: section of x01.yaml

The numbers come from x01_seed_tables.json (extracted from the seed text); this module
only says which operator each printed table shows.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

DATA = Path(__file__).with_name("x01_seed_tables.json")
X01 = Path(__file__).resolve().parents[2] / "tinyllm_tui" / "scenarios" / "x01.yaml"
MARK = "\nexpect:\n"

# Which operator each printed table of sections 2 and 3 shows (one prompt's prefill each).
PREFILL_TABLES = [
    ("hook_embed", None), ("blocks.0.ln1.hook_normalized", None),
    ("blocks.0.attn.hook_q", None), ("blocks.0.attn.hook_k", None), ("blocks.0.attn.hook_v", None),
    ("blocks.0.attn.hook_attn_scores", 0), ("blocks.0.attn.hook_pattern", 0), ("blocks.0.attn.hook_z", 0),
    ("blocks.0.attn.hook_attn_scores", 1), ("blocks.0.attn.hook_pattern", 1), ("blocks.0.attn.hook_z", 1),
    ("blocks.0.attn.hook_concat", None), ("blocks.0.hook_resid_mid", None),
    ("blocks.0.ln2.hook_normalized", None), ("blocks.0.hook_mlp_out", None),
    ("blocks.0.hook_resid_post", None), ("ln_final.hook_normalized", None),
    ("vocab table", None),  # rows: vocabulary; columns: logit before the filter, probability after
]
# Section 4: the cached step of the chosen token 爱 at position 3, then cached vs full.
DECODE_TABLES = ["hook_embed", "blocks.0.attn.hook_q", "blocks.0.attn.hook_k", "blocks.0.attn.hook_v",
                 "blocks.0.hook_resid_post", "cached vs full"]


def position(label: str) -> int:
    return int(re.match(r"位置(\d+)", label).group(1))


def entry(op: str, values: list[list[str]], rows: list[int], note: str, *, request: int = 0, round_: int = 0,
          head: int | None = None, run: str = "cached") -> str:
    lines = [f"  - op: {op}", f"    request: {request}", f"    round: {round_}"]
    lines += [f"    head: {head}"] if head is not None else []
    lines += [f"    run: {run}"] if run != "cached" else []
    lines += [f"    rows: {rows}", f"    note: {json.dumps(note, ensure_ascii=False)}", "    values:"]
    lines += [f"      - [{', '.join(_cell(v) for v in row)}]" for row in values]
    return "\n".join(lines)


def _cell(value: str) -> str:
    return '"−∞"' if value == "-inf" else value


def expect_section(tables: list[dict]) -> str:
    entries = []
    final_norm = PREFILL_TABLES.index(("ln_final.hook_normalized", None))
    for request, section in ((0, 2), (1, 3)):
        section_tables = [t for t in tables if t["section"] == section]
        last = position(section_tables[final_norm]["rows"][0]["label"])  # the text shows the last row only
        for (op, head), table in zip(PREFILL_TABLES, section_tables, strict=True):
            rows = table["rows"]
            if op == "vocab table":
                for column, name in enumerate(("unembed.hook_out", "sample.hook_probs")):
                    values = [[row["values"][column] for row in rows]]
                    entries.append(entry(name, values, [last], f"{table['heading']} ({table['columns'][column]})",
                                         request=request))
                continue
            entries.append(entry(op, [r["values"] for r in rows], [position(r["label"]) for r in rows],
                                 table["heading"], request=request, head=head))
    for op, table in zip(DECODE_TABLES, [t for t in tables if t["section"] == 4], strict=True):
        if op == "cached vs full":
            cached, full = table["rows"]
            entries.append(entry("blocks.0.hook_resid_post", [cached["values"]], [3], f"{table['heading']}: {cached['label']}", round_=1))
            entries.append(entry("blocks.0.hook_resid_post", [full["values"]], [3], f"{table['heading']}: {full['label']}", round_=1, run="full"))
        else:
            entries.append(entry(op, [table["rows"][0]["values"]], [3], table["heading"], round_=1))
    header = ("# Every computed table of 000_2a16b388d005b4f3.txt, numbers as printed (6 decimals, so each\n"
              "# cell must agree within 5e-7). Written by tests/data/x01_expectations.py from the seed text.")
    return MARK + header + "\n" + "\n".join(entries) + "\n"


def with_expectations(text: str, tables: list[dict]) -> str:
    return text.split(MARK)[0].rstrip("\n") + "\n" + expect_section(tables)


if __name__ == "__main__":
    tables = json.loads(DATA.read_text(encoding="utf-8"))
    if "--write" in sys.argv:
        X01.write_text(with_expectations(X01.read_text(encoding="utf-8"), tables), encoding="utf-8")
    else:
        sys.stdout.write(expect_section(tables))
