"""`neuromanifold rank`: The Jacobian rank at given weights, and the generic dimension."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .common import (EXIT_AMBIGUOUS, TimeLimitReached, check_timeout, err, print_json,
                     print_stopped, time_limit)


def rank(
    weights: Path = typer.Option(..., help=".npz of Q_i, K_i, V_i (or A_i, V_i), or a block file "
                                 "(Q_1_1, ..., docs/blocks.md), as `fiber` reads."),
    tokens: int = typer.Option(3, help="Number of tokens t."),
    attention: str = typer.Option("lightning", help="lightning or softmax."),
    method: str = typer.Option("auto", help="auto (float64, escalated to a proof on a thin gap or "
                               "a rank below the upper bound), numerical or certified."),
    samples: Optional[int] = typer.Option(None, help="Input samples N (default: 3 n_params rows)."),
    seed: int = typer.Option(0, help="Random seed for the inputs."),
    precision: Optional[int] = typer.Option(None, help="Starting bits of the ball arithmetic "
                                            "(default 128, doubled up to 1024)."),
    residual: bool = typer.Option(False, "--residual", help="Block files: residual connections."),
    activation: str = typer.Option("square", help="Block files: MLP activation."),
    norm: str = typer.Option("none", help="Block files: none, layernorm or rmsnorm."),
    generic: bool = typer.Option(True, help="Also compute the generic dimension of the architecture."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object on stdout."),
    timeout: Optional[float] = typer.Option(None, help="Seconds of wall time; past them the "
                                            "computation stops with status `stopped` and exit "
                                            "code 1."),
) -> None:
    """Jacobian rank at the given weights (their local functional dimension), with the generic dimension."""
    timeout = check_timeout(timeout)
    from ..dimension.point import rank_at_point  # noqa: PLC0415
    from ..io.block_weightfiles import is_block_file, read_block_weights  # noqa: PLC0415
    from ..io.weightfiles import read_weights  # noqa: PLC0415

    if is_block_file(weights):
        arch, point = read_block_weights(weights, tokens=tokens, attention=attention.lower(),
                                         residual=residual, activation=activation.lower(),
                                         norm=norm.lower(), name="weights")
    else:
        data = read_weights(weights, tokens=tokens, attention=attention.lower(), name="weights")
        arch, point = data.arch, data.layer_weights
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
        print_json(result.to_dict())
    else:
        print(result.summary())
    if not result.is_settled:
        raise typer.Exit(EXIT_AMBIGUOUS)
