"""How results look in a terminal and in a notebook: label/value tables, wrapped and as HTML.

Results lay themselves out as (label, text) pairs (`summary_lines`); these helpers turn such
pairs into the aligned text of `str(result)` (long values wrapped under their column) and into
the HTML table a notebook shows (`_repr_html_`). Nothing here computes or rounds a result: the
values are the ones `to_dict` holds; only witnesses are shown to `WITNESS_DIGITS` significant
digits (their full values stay in `to_dict` and in `--json`).
"""

from __future__ import annotations

import html
import json
import textwrap

# The width `str(result)` wraps long values to (a notebook cell or an 100-column terminal).
TEXT_WIDTH = 100
# Significant digits of the floats of a fiber witness when shown (JSON keeps all 17).
WITNESS_DIGITS = 6


def label_table(lines: list[tuple[str, str]], width: int | None = TEXT_WIDTH,
                column: int | None = None) -> str:
    """'label   value' lines, labels padded to `column` (default: the longest label); values
    longer than `width` (total) continue on indented lines below (no wrapping when None)."""
    column = max(len(label) for label, _ in lines) if column is None else column
    out = []
    for label, value in lines:
        head = f"{label:<{column}}  "
        if width is None or len(head) + len(value) <= width:
            out.append(head + value)
            continue
        out.append(textwrap.fill(value, width=max(width, len(head) + 20), initial_indent=head,
                                 subsequent_indent=" " * len(head), break_on_hyphens=False,
                                 break_long_words=False))
    return "\n".join(out)


def html_table(title: str, lines: list[tuple[str, str]]) -> str:
    """A two-column HTML table of (label, value) pairs under a bold `title`, for notebooks."""
    rows = "".join(f"<tr><th style=\"text-align:left;vertical-align:top\">{html.escape(label)}</th>"
                   f"<td style=\"text-align:left\">{html.escape(value)}</td></tr>"
                   for label, value in lines)
    return f"<div><strong>{html.escape(title)}</strong><table>{rows}</table></div>"


def rounded(value: object, digits: int = WITNESS_DIGITS) -> object:
    """`value` with every float rounded to `digits` significant digits (lists and dicts walked)."""
    if isinstance(value, float):
        return float(f"{value:.{digits}g}")
    if isinstance(value, dict):
        return {k: rounded(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [rounded(v, digits) for v in value]
    return value


def short_json(value: object) -> str:
    """Compact JSON of `value` with floats to `WITNESS_DIGITS` significant digits."""
    return json.dumps(rounded(value))


def architecture_text(arch: dict) -> str:
    """'widths=3,3,3 keys=2,2 tokens=3 attention=lightning' from an architecture's `to_dict`."""
    return " ".join(f"{k}={','.join(map(str, v)) if isinstance(v, list) else v}"
                    for k, v in arch.items())


class Tabulated:
    """`summary`, `str` and the notebook's `_repr_html_` of a result that lists its
    `summary_lines()` and names itself in `_title()`."""

    summary_column: int | None = None  # the labels' column (default: the longest label)

    def summary_lines(self) -> list[tuple[str, str]]:  # pragma: no cover - each result's own
        raise NotImplementedError

    def _title(self) -> str:  # pragma: no cover - each result's own
        raise NotImplementedError

    def summary(self, width: int | None = None) -> str:
        """The table the command line prints; values longer than `width` columns wrap."""
        return label_table(self.summary_lines(), width, self.summary_column)

    def __str__(self) -> str:
        return self.summary(TEXT_WIDTH)

    def _repr_html_(self) -> str:
        return html_table(self._title(), self.summary_lines())
