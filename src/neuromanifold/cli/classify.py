"""`neuromanifold classify`: Classify a point of a single-layer neuromanifold."""

from __future__ import annotations

from pathlib import Path

import typer

from ..core.checks import bad_value
from .common import EXIT_AMBIGUOUS, print_json


def classify(
    weights: Path = typer.Option(..., help="Single-layer .npz with Q_1, K_1, V_1 (or A_1, V_1)."),
    tokens: int = typer.Option(3, help="Number of tokens t (Theorem 3.4 needs t >= 2)."),
    seed: int = typer.Option(0, help="Random seed for the Jacobian's inputs."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object on stdout."),
) -> None:
    """Smooth, singular, boundary or critical point of one lightning layer (Thm 3.4), with Jacobian rank."""
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
        rank_how = (f"exact over F_p, p = {result.prime}" if result.rank_method == "exact" else
                    f"numerical, gap {result.rank_gap:.1f} decades")
        lines = [("weights", f"{weights} (d = {result.widths[0]}, d' = {result.widths[1]}, a = {result.keys}, "
                  f"t = {tokens})"), ("seed", str(seed)),
                 ("smooth", str(result.smooth)), ("singular", str(result.singular)),
                 ("boundary", str(result.boundary)), ("critical", str(result.critical)),
                 ("jacobian rank", f"{result.jacobian_rank} [{rank_how}; {result.jacobian_parametrisation}, "
                  f"N = {result.n_samples}]"),
                 ("theorem says", f"{result.expected_jacobian_rank} (generic {result.generic_jacobian_rank}); "
                  + ("agrees" if result.agrees else "DISAGREES"))]
        lines += [("notes", n) for n in result.notes]
        width = max(len(k) for k, _ in lines)
        for key, value in lines:
            print(f"{key:<{width}}  {value}")
    if not (result.agrees and result.ranks_settled):
        raise typer.Exit(EXIT_AMBIGUOUS)
