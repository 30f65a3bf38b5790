"""`neuromanifold fiber`: Compare two weight files."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..core.checks import bad_value, check_seed
from .common import ACTIVATION_OPTION, NORM_OPTION, RESIDUAL_OPTION, print_json


def fiber(
    weights: Path = typer.Option(..., help="First .npz (Q_i, K_i, V_i or A_i, V_i)."),
    other: Path = typer.Option(..., help="Second .npz of the same architecture."),
    tokens: int = typer.Option(3, help="Number of tokens t."),
    attention: str = typer.Option("lightning", help="lightning or softmax."),
    method: str = typer.Option("auto", help="auto (exact for integer weights of a polynomial network: lightning, square or no MLP, no norm), exact or numerical."),
    tolerance: float = typer.Option(1e-8, help="Relative tolerance of the numerical test."),
    seed: int = typer.Option(0, help="Random seed for the test inputs."),
    residual: Optional[bool] = RESIDUAL_OPTION,
    activation: Optional[str] = ACTIVATION_OPTION,
    norm: Optional[str] = NORM_OPTION,
    as_json: bool = typer.Option(False, "--json", help="One JSON object on stdout."),
) -> None:
    """Do two weight files define the same function? If so, print the group element relating them.

    Files with per-head names (Q_1_1, ..., docs/blocks.md) are block networks."""
    check_seed(seed)
    from ..geometry.moves import same_block_function  # noqa: PLC0415
    from ..geometry.fibers import same_function  # noqa: PLC0415
    from ..io.weightfiles import read_network_file  # noqa: PLC0415

    options = dict(tokens=tokens, attention=attention.lower(), residual=residual,
                   activation=activation and activation.lower(), norm=norm and norm.lower())
    first = read_network_file(weights, name="weights", **options)
    second = read_network_file(other, name="other", **options)
    if first.arch.has_decoder_options:
        raise bad_value("weights", "a network without decoder blocks (fiber's moves cover heads, "
                        "values, residuals, MLPs and norms)", str(first.arch),
                        "Use `neuromanifold rank` for its rank; docs/decoder_features.md lists "
                        "what fiber does not take yet.")
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
