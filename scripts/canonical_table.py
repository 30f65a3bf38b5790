"""The family table of docs/canonical.md: what `canonical` quotients by, family by family.

Run `PYTHONPATH=src python scripts/canonical_table.py` to print it, or with `--write` to replace
the block between the markers of docs/canonical.md; tests/symmetries/test_canonical.py
recomputes it and compares with the page. Each row is a converted family's shipped config
(`models.hf.shipped_config`, its scaled rotary frequencies dropped), read as its native network
on 8 tokens (GPT-2 and BERT on their whole position table): the registry's families that apply,
split by `symmetries.canonical.quotiented` and `not_quotiented`; the discrete families (head,
group and neuron permutations) are quotiented wherever they apply.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from doc_blocks import print_or_write  # noqa: E402

from neuromanifold.models import certify  # noqa: E402
from neuromanifold.models.convert import CONVERTED  # noqa: E402
from neuromanifold.models.hf import shipped_config  # noqa: E402
from neuromanifold.symmetries.canonical import not_quotiented, quotiented  # noqa: E402

PAGE = Path(__file__).resolve().parents[1] / "docs" / "canonical.md"
BEGIN, END = "<!-- canonical_table: begin -->", "<!-- canonical_table: end -->"


def table() -> str:
    rows = ["| family | shipped config, as read | quotiented (continuous) | not quotiented |",
            "| --- | --- | --- | --- |"]
    for mt in CONVERTED:
        cfg = dict(shipped_config(mt))
        cfg.pop("rope_scaling", None)
        output = "hidden" if mt == "bert" else "logits"
        arch = certify.native_network(cfg, 8, output)
        left = not_quotiented(arch)
        read = ", ".join(x for x in (
            arch.norm + (" post-norm" if arch.post_norm else ""),
            "tied" if arch.tied else ("untied" if arch.vocab and not arch.hidden_output else
                                      "hidden state"),
            {"rope": "rotary", "learned": "learned positions"}.get(arch.positions, arch.positions),
            "grouped kv" if arch.kv_heads else "", "gated MLP" if arch.mlp_kind == "gated" else
            f"{arch.activation} MLP", "biases" if arch.bias else "", "QK-norm" if arch.qk_norm
            else "", "parallel" if arch.parallel else "") if x)
        rows.append(f"| {mt} | {read} | {', '.join(quotiented(arch))} "
                    f"| {', '.join(left) if left else 'none'} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print_or_write(PAGE, BEGIN, END, table(), sys.argv[1:])
