"""Extract every printed table of a seed text into JSON: numbers only, nothing retyped.

Usage: python tests/data/extract_seed_tables.py ../shared/seeds/000_2a16b388d005b4f3.txt > tests/data/x01_seed_tables.json

A table is a header line starting with "对象" followed by tab-separated rows; the
numbered section headings ("2．…") group them. Numbers stay the text printed (so their
precision is kept), with "−" as "-" and "−∞" as "-inf".
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

SECTION = re.compile(r"^(\d+)．")


def parse_number(text: str) -> str:
    text = text.strip().replace("−", "-")
    if text == "-∞":
        return "-inf"
    float(text)  # refuse anything that is not a number
    return text


def extract(text: str) -> list[dict]:
    tables, section, heading = [], 0, ""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if match := SECTION.match(line):
            section = int(match.group(1))
        elif line.startswith("对象\t"):
            rows, i = [], i + 1
            while i < len(lines) and "\t" in lines[i]:
                label, *cells = lines[i].split("\t")
                rows.append({"label": label, "values": [parse_number(c) for c in cells]})
                i += 1
            tables.append({"section": section, "heading": heading, "columns": line.split("\t")[1:], "rows": rows})
            continue
        elif line.strip() and "\t" not in line:
            heading = _heading(lines, i)
        i += 1
    return tables


def _heading(lines: list[str], i: int) -> str:
    """The table's title: the last short paragraph (descriptions are full sentences)."""
    line = lines[i].strip()
    return line if not line.endswith("。") else _previous_title(lines, i)


def _previous_title(lines: list[str], i: int) -> str:
    for j in range(i - 1, -1, -1):
        if lines[j].strip() and not lines[j].strip().endswith("。"):
            return lines[j].strip()
    return ""


if __name__ == "__main__":
    tables = extract(Path(sys.argv[1]).read_text(encoding="utf-8"))
    json.dump(tables, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")
