"""`neuromanifold fiber`: Compare two weight files."""

from __future__ import annotations

from pathlib import Path

import typer

from ..core.checks import bad_value, check_seed
from .common import print_json


def fiber(
    weights: Path = typer.Option(..., help="First .npz (Q_i, K_i, V_i or A_i, V_i)."),
    other: Path = typer.Option(..., help="Second .npz of the same architecture."),
    tokens: int = typer.Option(3, help="Number of tokens t."),
    attention: str = typer.Option("lightning", help="lightning or softmax."),
    method: str = typer.Option("auto", help="auto (exact for integer lightning weights), exact or numerical."),
    tolerance: float = typer.Option(1e-8, help="Relative tolerance of the numerical test."),
    seed: int = typer.Option(0, help="Random seed for the test inputs."),
    residual: bool = typer.Option(False, "--residual", help="Block files: residual connections."),
    activation: str = typer.Option("square", help="Block files: MLP activation."),
    norm: str = typer.Option("none", help="Block files: none, layernorm or rmsnorm."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object on stdout."),
) -> None:
    """Do two weight files define the same function? If so, print the group element relating them.

    Files with per-head names (Q_1_1, ..., docs/blocks.md) are block networks."""
    check_seed(seed)
    from ..geometry.fibers import same_function  # noqa: PLC0415
    from ..io.block_weightfiles import is_block_file  # noqa: PLC0415
    from ..io.weightfiles import read_weights  # noqa: PLC0415

    if is_block_file(weights):
        _block_fiber(weights, other, tokens, attention.lower(), residual, activation.lower(),
                     norm.lower(), tolerance, seed, as_json)
        return

    first = read_weights(weights, tokens=tokens, attention=attention.lower(), name="weights")
    second = read_weights(other, tokens=tokens, attention=attention.lower(), name="other")
    if first.arch != second.arch:
        raise bad_value("other", f"weights of the same architecture as --weights ({first.arch})",
                        str(second.arch), "Pass two files with the same shapes.")
    result = same_function(first.arch, first.layer_weights, second.layer_weights, method=method.lower(),
                           tolerance=tolerance, seed=seed)
    if as_json:
        print_json({"seed": seed, "architecture": first.arch.to_dict(), **result.to_dict()})
        return
    print(f"architecture    {first.arch}")
    print(f"seed            {seed}")
    print(result.summary())


def _block_fiber(weights: Path, other: Path, tokens: int, attention: str, residual: bool,
                 activation: str, norm: str, tolerance: float, seed: int, as_json: bool) -> None:
    """`fiber` for two block weight files."""
    from ..geometry.block_fibers import same_block_function  # noqa: PLC0415
    from ..io.block_weightfiles import read_block_weights  # noqa: PLC0415

    options = dict(tokens=tokens, attention=attention, residual=residual, activation=activation, norm=norm)
    arch, first = read_block_weights(weights, name="weights", **options)
    arch2, second = read_block_weights(other, name="other", **options)
    if arch != arch2:
        raise bad_value("other", f"weights of the same architecture as --weights ({arch})",
                        str(arch2), "Pass two files with the same shapes.")
    result = same_block_function(arch, first, second, tolerance=tolerance, seed=seed)
    if as_json:
        print_json({"seed": seed, "architecture": arch.to_dict(), **result.to_dict()})
        return
    print(f"architecture    {arch}")
    print(f"seed            {seed}")
    print(result.summary())
