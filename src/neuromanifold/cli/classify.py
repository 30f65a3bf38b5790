"""`neuromanifold classify`: Classify a point of a single-layer neuromanifold."""

from __future__ import annotations

from pathlib import Path

import typer

from ..core.checks import bad_value, check_int, check_seed
from .common import EXIT_AMBIGUOUS, print_json


def classify(
    weights: Path = typer.Option(..., help="Single-layer .npz with Q_1, K_1, V_1 (or A_1, V_1)."),
    tokens: int = typer.Option(3, help="Number of tokens t (Theorem 3.4 needs t >= 2)."),
    seed: int = typer.Option(0, help="Random seed for the Jacobian's inputs."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object on stdout."),
) -> None:
    """Smooth, singular, boundary or critical point of one lightning layer (Thm 3.4), with Jacobian rank."""
    check_seed(seed)
    check_int("tokens", tokens, minimum=2, fix="Pass --tokens 2 or more (Theorem 3.4 needs t >= 2).")
    from ..geometry.classify import classify_layer  # noqa: PLC0415
    from ..io.weightfiles import read_weights  # noqa: PLC0415

    data = read_weights(weights, tokens=tokens, name="weights")
    if data.arch.n_layers != 1:
        raise bad_value("weights", "a single-layer file for classify (Theorem 3.4 is about one layer)",
                        f"{data.arch.n_layers} layers in {weights}", "Pass a file with Q_1, K_1, V_1 only.")
    result = classify_layer(data.attention_weights, tokens=tokens, seed=seed)
    if as_json:
        print_json({"seed": seed, **result.to_dict()})
    else:
        lines = [("weights", f"{weights} (d = {result.widths[0]}, d' = {result.widths[1]}, a = {result.keys}, "
                  f"t = {tokens})"), ("seed", str(seed))] + result.summary_lines()
        width = max(len(k) for k, _ in lines)
        for key, value in lines:
            print(f"{key:<{width}}  {value}")
    if not (result.agrees and result.ranks_settled):
        raise typer.Exit(EXIT_AMBIGUOUS)
