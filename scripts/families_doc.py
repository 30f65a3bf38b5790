"""The supported Hugging Face families in the docs, written from `neuromanifold.models.families`.

Two kinds of generated text: the table of docs/models.md ("Supported families", between its
markers), and inline lists, each between `<!-- families: TIER -->` and `<!-- /families -->` on
one line of a page (docs/**/*.md, README.md) or of a notebook's markdown cell
(docs/notebooks/*.ipynb), TIER one of `TIERS`. Run `PYTHONPATH=src python
scripts/families_doc.py` to print the table, `--write` to rewrite the table and every list, and
`--check` to exit 1 naming what is stale; tests/project/test_families.py runs the check.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # doc_blocks, run or loaded by path
from doc_blocks import read_block, write_block  # noqa: E402

from neuromanifold.models.families import (COUNTING_RULES, FAMILIES,  # noqa: E402
                                           REGISTRY_COUNTED, listed)
from neuromanifold.models.hf import shipped_source  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "models.md"
BEGIN, END = "<!-- families_table: begin -->", "<!-- families_table: end -->"
TIERS = {"all": FAMILIES, "rules": COUNTING_RULES, "registry": REGISTRY_COUNTED}
SPAN = re.compile(r"(<!-- families: (\w+) -->)(.*?)(<!-- /families -->)")


def table() -> str:
    """One row per family: its shipped config's source, how `count` counts it, and whether
    `dim --hf-config` measures it."""
    rows = ["| family (`model_type`) | shipped config (`count --model-type`), from | `count` | "
            "`dim --hf-config` |", "| --- | --- | --- | --- |"]
    for mt in FAMILIES:
        ruled = mt in COUNTING_RULES
        rows.append(f"| {mt} | {shipped_source(mt).split()[0]} | "
                    + ("counting rules" if ruled else "the symmetry registry, on the converted "
                       "network") + " | " + ("measured shrunk" if ruled else "refused (no counting "
                                             "rules; `count --validate` certifies it shrunk)") + " |")
    return "\n".join(rows)


def pages() -> list[Path]:
    """The files whose inline lists are generated: the site's pages, the README, the notebooks."""
    docs = ROOT / "docs"
    return sorted(docs.rglob("*.md")) + [ROOT / "README.md"] + sorted(docs.rglob("*.ipynb"))


def spans(text: str) -> list[tuple[str, str]]:
    """(tier, listed text) of every inline list of `text`."""
    return [(m.group(2), m.group(3)) for m in SPAN.finditer(text)]


def filled(text: str) -> str:
    """`text` with every inline list rewritten from its tier (an unknown tier: ValueError)."""
    def fill(m: re.Match) -> str:
        if m.group(2) not in TIERS:
            raise ValueError(f"`families` tier must be one of {', '.join(TIERS)}; got "
                             f"{m.group(2)!r}. Fix the marker {m.group(1)}.")
        return m.group(1) + listed(TIERS[m.group(2)]) + m.group(4)
    return SPAN.sub(fill, text)


def stale() -> list[str]:
    """The generated texts that differ from what the package says now."""
    out = [f"{PAGE.relative_to(ROOT)}: the families table"] if read_block(PAGE, BEGIN, END) != table() else []
    for path in pages():
        text = path.read_text(encoding="utf-8")
        if filled(text) != text:
            out.append(f"{path.relative_to(ROOT)}: an inline list of families")
    return out


def main(argv: list[str]) -> int:
    if "--check" in argv:
        found = stale()
        for line in found:
            print(f"stale: {line} (run scripts/families_doc.py --write)", file=sys.stderr)
        return 1 if found else 0
    if "--write" in argv:
        write_block(PAGE, BEGIN, END, table())
        for path in pages():
            text = path.read_text(encoding="utf-8")
            if filled(text) != text:
                path.write_text(filled(text), encoding="utf-8")
    print(table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
