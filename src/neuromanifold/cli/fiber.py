"""`neuromanifold fiber`: Compare two weight files."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..core.checks import bad_value, check_seed
from .common import (ACTIVATION_OPTION, BIAS_OPTION, CAUSAL_OPTION, FINAL_NORM_OPTION,
                     KV_HEADS_OPTION, MLP_BIAS_OPTION, MLP_KIND_OPTION, NORM_OPTION,
                     PARALLEL_OPTION, POSITIONS_OPTION, QK_NORM_OPTION, RESIDUAL_OPTION,
                     ROPE_PAIRS_OPTION, TIED_OPTION, VOCAB_OPTION, check_stored_options,
                     parse_per_layer, print_json)
from .common import METHOD, NETWORK, OUTPUT  # the --help panels


def fiber(
    weights: Path = typer.Option(..., help="First .npz (Q_i, K_i, V_i or A_i, V_i), or a block "
                                 "file (docs/blocks.md; decoder blocks, docs/decoder_features.md).",
                                 rich_help_panel=NETWORK),
    other: Path = typer.Option(..., help="Second .npz of the same architecture.",
                               rich_help_panel=NETWORK),
    tokens: int = typer.Option(3, help="Number of tokens t.", rich_help_panel=NETWORK),
    attention: str = typer.Option("lightning", help="lightning or softmax.",
                                  rich_help_panel=NETWORK),
    residual: Optional[bool] = RESIDUAL_OPTION,
    activation: Optional[str] = ACTIVATION_OPTION,
    norm: Optional[str] = NORM_OPTION,
    causal: bool = CAUSAL_OPTION,
    positions: str = POSITIONS_OPTION,
    rope_pairs: Optional[str] = ROPE_PAIRS_OPTION,
    parallel: bool = PARALLEL_OPTION,
    kv_heads: Optional[str] = KV_HEADS_OPTION,
    bias: Optional[bool] = BIAS_OPTION,
    mlp_bias: Optional[bool] = MLP_BIAS_OPTION,
    mlp_kind: Optional[str] = MLP_KIND_OPTION,
    vocab: Optional[int] = VOCAB_OPTION,
    tied: Optional[bool] = TIED_OPTION,
    qk_norm: Optional[bool] = QK_NORM_OPTION,
    final_norm: Optional[bool] = FINAL_NORM_OPTION,
    method: str = typer.Option("auto", help="auto (exact for integer weights of a polynomial network: lightning, square or no MLP, no norm), exact or numerical.",
                               rich_help_panel=METHOD),
    tolerance: float = typer.Option(1e-8, help="Relative tolerance of the numerical test.",
                                    rich_help_panel=METHOD),
    seed: int = typer.Option(0, help="Random seed for the test inputs.", rich_help_panel=METHOD),
    as_json: bool = typer.Option(False, "--json", help="One JSON object on stdout.",
                                 rich_help_panel=OUTPUT),
) -> None:
    """Do two weight files define the same function? If so, print the group element relating them.

    Files with per-head names (Q_1_1, ..., docs/blocks.md) are block networks; decoder blocks
    (docs/decoder_features.md) are read from their names. Where the moves of a network's
    symmetry families are not searched, a pair of equal functions is `unexplained`, with a note
    naming them."""
    check_seed(seed)
    from ..geometry.moves import same_block_function  # noqa: PLC0415
    from ..geometry.fibers import same_function  # noqa: PLC0415
    from ..io.weightfiles import read_network_file  # noqa: PLC0415

    options = dict(tokens=tokens, attention=attention.lower(), residual=residual,
                   activation=activation and activation.lower(), norm=norm and norm.lower(),
                   causal=causal, positions=positions.lower(),
                   rope_pairs=None if rope_pairs is None else parse_per_layer(
                       "rope-pairs", rope_pairs, "1,1"), parallel=parallel)
    first = read_network_file(weights, name="weights", **options)
    second = read_network_file(other, name="other", **options)
    check_stored_options(first.arch, kv_heads=kv_heads, bias=bias, mlp_bias=mlp_bias,
                         mlp_kind=mlp_kind, vocab=vocab, tied=tied, qk_norm=qk_norm,
                         final_norm=final_norm)
    if first.arch != second.arch:
        raise bad_value("other", f"weights of the same architecture as --weights ({first.arch})",
                        str(second.arch), "Pass two files with the same shapes.")
    if first.format == "block":
        result = same_block_function(first.arch, first.point, second.point, method=method.lower(),
                                     tolerance=tolerance, seed=seed)
    else:
        result = same_function(first.arch, first.point, second.point, method=method.lower(),
                               tolerance=tolerance, seed=seed)
    if as_json:
        print_json({"seed": seed, "architecture": first.arch.to_dict(), "read_as": first.to_dict(),
                    **result.to_dict()})
        return
    print(f"read as         {first.arch}  [{first.reading}]")
    print(f"seed            {seed}")
    print(result.summary())
