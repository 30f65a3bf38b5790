"""`neuromanifold rank`: The Jacobian rank at given weights, and the generic dimension."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .common import (ACTIVATION_OPTION, BIAS_OPTION, CAUSAL_OPTION, EXIT_AMBIGUOUS,
                     FINAL_NORM_OPTION, KV_HEADS_OPTION, MLP_BIAS_OPTION, MLP_KIND_OPTION,
                     NORM_OPTION, PARALLEL_OPTION, POSITIONS_OPTION, QK_NORM_OPTION,
                     RESIDUAL_OPTION, ROPE_PAIRS_OPTION, TIED_OPTION, VOCAB_OPTION,
                     TimeLimitReached, check_stored_options, check_timeout, err, parse_per_layer,
                     print_json, print_stopped, time_limit)


def rank(
    weights: Path = typer.Option(..., help=".npz of Q_i, K_i, V_i (or A_i, V_i), or a block file "
                                 "(Q_1_1, ..., docs/blocks.md; decoder blocks, "
                                 "docs/decoder_features.md), as `fiber` reads."),
    tokens: int = typer.Option(3, help="Number of tokens t."),
    attention: str = typer.Option("lightning", help="lightning or softmax."),
    method: str = typer.Option("auto", help="auto (float64, escalated to a proof on a thin gap or "
                               "a rank below the upper bound), numerical or certified."),
    samples: Optional[int] = typer.Option(None, help="Input samples N (default: 3 n_params rows)."),
    seed: int = typer.Option(0, help="Random seed for the inputs."),
    precision: Optional[int] = typer.Option(None, help="Starting bits of the ball arithmetic "
                                            "(default 128, doubled up to 1024)."),
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
    generic: bool = typer.Option(True, help="Also compute the generic dimension of the architecture."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object on stdout."),
    timeout: Optional[float] = typer.Option(None, help="Seconds of wall time; past them the "
                                            "computation stops with status `stopped` and exit "
                                            "code 1."),
) -> None:
    """Jacobian rank at the given weights (their local functional dimension), with the generic dimension."""
    timeout = check_timeout(timeout)
    from ..dimension.point import rank_at_point  # noqa: PLC0415
    from ..io.weightfiles import read_network_file  # noqa: PLC0415

    data = read_network_file(weights, tokens=tokens, attention=attention.lower(), residual=residual,
                             activation=activation and activation.lower(),
                             norm=norm and norm.lower(), causal=causal,
                             positions=positions.lower(),
                             rope_pairs=None if rope_pairs is None else parse_per_layer(
                                 "rope-pairs", rope_pairs, "1,1"),
                             parallel=parallel, name="weights")
    check_stored_options(data.arch, kv_heads=kv_heads, bias=bias, mlp_bias=mlp_bias,
                         mlp_kind=mlp_kind, vocab=vocab, tied=tied, qk_norm=qk_norm,
                         final_norm=final_norm)
    arch, point = data.arch, data.point
    progress = None if as_json else (lambda msg: err.print(msg, style="dim"))
    try:
        with time_limit(timeout):
            result = rank_at_point(arch, point, method=method.lower(), samples=samples,
                                   seed=seed, precision=precision, generic=generic,
                                   progress=progress)
    except TimeLimitReached:
        print_stopped("rank", timeout, as_json, arch.to_dict())
        raise typer.Exit(EXIT_AMBIGUOUS) from None
    if as_json:
        print_json({"read_as": data.to_dict(), **result.to_dict()})
    else:
        print(f"read as  {data.arch}  [{data.reading}]")
        print(result.summary())
    if not result.is_settled:
        raise typer.Exit(EXIT_AMBIGUOUS)
