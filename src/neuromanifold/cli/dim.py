"""`neuromanifold dim`: Dimension of one architecture."""

from __future__ import annotations

from typing import Optional

import typer

from ..core.checks import check_seed
from .common import EXIT_AMBIGUOUS, build_architecture, err, print_json


def dim(
    widths: str = typer.Option(..., help="Widths d_0,...,d_l, e.g. 5,3,3,5."),
    keys: str = typer.Option(..., help="Key widths a_1,...,a_l, e.g. 2,2,2."),
    tokens: int = typer.Option(3, help="Number of tokens t."),
    attention: str = typer.Option("lightning", help="lightning or softmax."),
    temperature: float = typer.Option(1.0, help="Softmax temperature tau in exp(x / tau)."),
    method: str = typer.Option("auto", help="auto, numerical, exact or certified."),
    samples: Optional[int] = typer.Option(None, help="Input samples N (default: grown until the rank saturates)."),
    seed: int = typer.Option(0, help="Random seed for weights and inputs."),
    device: str = typer.Option("cpu", help="cpu, cuda or auto (numerical method)."),
    prime: Optional[int] = typer.Option(None, help="Prime p < 2^31 for the exact and certified methods "
                                        "(default 2147483629)."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object on stdout."),
) -> None:
    """Dimension of the neuromanifold of one architecture, with how it was obtained."""
    check_seed(seed)
    arch = build_architecture(widths, keys, tokens, attention, temperature)
    progress = None if as_json else (lambda msg: err.print(msg, style="dim"))
    from ..dimension.api import neuromanifold_dim  # noqa: PLC0415  (torch only when computing)

    result = neuromanifold_dim(arch, method=method.lower(), samples=samples, seed=seed,
                               device=device, prime=prime, progress=progress)
    if as_json:
        print_json(result.to_dict())
    else:
        print(result.summary())
    # A bare lower bound is what `--method exact` asks for; anywhere else it is not settled.
    done = ("settled", "certified") + (("lower-bound",) if method.lower() == "exact" else ())
    if result.status not in done:
        raise typer.Exit(EXIT_AMBIGUOUS)
