"""The shrunk-BERT table of docs/decoder_features.md#post-norm-blocks-bert: certified at eps 1e-12.

Run `PYTHONPATH=src python scripts/bert_table.py` to print it, or with `--write` to replace the
block between the markers of the page; tests/symmetries/test_post_norm_families.py recomputes it
and compares with the page. Each row: a tiny seeded BertModel (2 heads, 2 token types, BERT's
eps 1e-12, erf GELU) converted by `neuromanifold.models.convert.from_transformers`; the
parameters; the families' count (parameters less the incremental rank of the registry's
families mod p); `neuromanifold_dim(arch, method="certified")` (status and bracket) and the float
reading (`numerical`: its status and rank), which the norms' eps keeps from settling below the
bound.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # doc_blocks, run or loaded by path
from doc_blocks import print_or_write, read_block  # noqa: E402

PAGE = Path(__file__).resolve().parents[1] / "docs" / "decoder_features.md"
BEGIN, END = "<!-- bert_table: begin -->", "<!-- bert_table: end -->"
# (hidden, layers, intermediate, vocab, tokens): vocabulary above hidden + 2, 2 heads.
SIZES = [(4, 1, 5, 7, 3), (4, 2, 5, 7, 3)]


def shrunk_bert(size: int):
    """(BertModel, arch, blocks) of SIZES[size]: a seeded float64 BertModel without pooler, every
    parameter moved off its initial value, converted on t tokens."""
    import torch  # noqa: PLC0415
    import transformers  # noqa: PLC0415

    from neuromanifold.models.convert import from_transformers  # noqa: PLC0415

    d, l, m, V, t = SIZES[size]
    config = transformers.BertConfig(hidden_size=d, num_attention_heads=2, num_hidden_layers=l,
                                     intermediate_size=m, vocab_size=V, type_vocab_size=2,
                                     max_position_embeddings=8)
    torch.manual_seed(50 + size)
    model = transformers.BertModel(config, add_pooling_layer=False).double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    arch, blocks = from_transformers(model, t)
    return model, arch, blocks


def row(size: int) -> tuple[str, dict]:
    """One markdown row and its values (parameters, count, certified and float readings)."""
    from neuromanifold.dimension.api import neuromanifold_dim  # noqa: PLC0415
    from neuromanifold.dimension.ball_dual import block_upper_bound  # noqa: PLC0415

    _, arch, _ = shrunk_bert(size)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cert = neuromanifold_dim(arch, method="certified")
        num = neuromanifold_dim(arch, method="numerical")
    count = block_upper_bound(arch)[0]       # n_params - rank_p of the registry's tangents
    values = dict(n_params=arch.n_params, count=count, status=cert.status,
                  lower=cert.lower_bound, upper=cert.upper_bound, float_status=num.status,
                  float_rank=num.dimension)
    d, l, m, V, t = SIZES[size]
    text = (f"| d = {d}, {l} layer{'s' * (l > 1)}, 2 heads, MLP {m}, V = {V}, 2 types, t = {t} | "
            f"{arch.n_params} | {count} | {cert.status}: {cert.lower_bound} <= dim <= "
            f"{cert.upper_bound} | {num.status}, rank {num.dimension} |")
    return text, values


def table(lines: list[str] | None = None) -> str:
    """The markdown table (its rows computed unless given, as `row(size)[0]`)."""
    rows = ["| shrunk BERT (eps 1e-12) | parameters | families' count | certified path | "
            "float64 reading |", "|---|---|---|---|---|"]
    rows += lines if lines is not None else [row(size)[0] for size in range(len(SIZES))]
    return "\n".join(rows)


def page_block() -> str:
    return read_block(PAGE, BEGIN, END)


def main() -> None:
    print_or_write(PAGE, BEGIN, END, table(), sys.argv)


if __name__ == "__main__":
    main()
