"""`neuromanifold ed-degree`: the ED degree of a polynomial network's neurovariety (evaluated at N inputs)."""

from __future__ import annotations

from typing import Optional

import typer

from ..core.checks import bad_value, check_seed
from .degree import MAX_MEMORY_HELP, TIMEOUT_GRACE
from .common import (
    TimeLimitReached,
    print_stopped,
    time_limit,
    EXIT_AMBIGUOUS,
    build_block_architecture,
    print_json,
    stderr_progress,
)
from .common import METHOD, NETWORK, OUTPUT, RESOURCES  # the --help panels


def _weights(text: str):
    if text in ("standard", "generic"):
        return text
    try:
        return [int(v) for v in text.split(",")]
    except ValueError:
        raise bad_value("weights", "'standard', 'generic' or comma-separated nonzero integers", text,
                        "Pass --weights standard.") from None


def ed_degree_command(
    widths: str = typer.Option(..., help="Widths d_0,...,d_l, e.g. 2,1.", rich_help_panel=NETWORK),
    keys: str = typer.Option(..., help="Key widths a_1,...,a_l, e.g. 2.", rich_help_panel=NETWORK),
    tokens: int = typer.Option(2, help="Number of tokens t.", rich_help_panel=NETWORK),
    attention: str = typer.Option("lightning", help="lightning (softmax has no ED degree: refused).",
                                  rich_help_panel=NETWORK),
    heads: Optional[str] = typer.Option(None, help="Heads per layer H_1,...,H_l (default 1 each).",
                                        rich_help_panel=NETWORK),
    values: Optional[str] = typer.Option(None, help="Per-head value widths v_1,...,v_l (V = O W).",
                                         rich_help_panel=NETWORK),
    residual: bool = typer.Option(False, "--residual", help="Residual connections (equal widths).",
                                  rich_help_panel=NETWORK),
    mlp: Optional[str] = typer.Option(None, help="MLP width after each layer m_1,...,m_l (0: none).",
                                      rich_help_panel=NETWORK),
    activation: str = typer.Option("square", help="MLP activation: square (others are refused).",
                                   rich_help_panel=NETWORK),
    norm: str = typer.Option("none", help="none (a norm is refused: not polynomial).",
                             rich_help_panel=NETWORK),
    inputs: Optional[int] = typer.Option(None, help="N input sequences (default: the least N whose "
                                         "evaluation is injective on the span).",
                                         rich_help_panel=METHOD),
    weights: str = typer.Option("standard", help="Metric on the outputs: standard, generic (random "
                                "diagonal) or comma-separated nonzero integer weights lambda_i.",
                                rich_help_panel=METHOD),
    timeout: float = typer.Option(600.0, help="Seconds for the whole run (every phase: dimension, "
                                  "span, inputs, minors and solves); past it the result is "
                                  "stopped, never guessed.", rich_help_panel=RESOURCES),
    max_memory: Optional[str] = typer.Option(None, help=MAX_MEMORY_HELP, rich_help_panel=RESOURCES),
    repeats: int = typer.Option(2, help="Independent runs per prime (two primes near 2^30).",
                                rich_help_panel=METHOD),
    seed: int = typer.Option(0, help="Random seed for the gauge points, data, weights and inputs.",
                             rich_help_panel=METHOD),
    as_json: bool = typer.Option(False, "--json", help="One JSON object on stdout.",
                                 rich_help_panel=OUTPUT),
) -> None:
    """ED degree of the neurovariety of a polynomial network under evaluation at N inputs
    (critical points of the squared loss for generic targets), exact over F_p (randomised).

    Example: neuromanifold ed-degree --widths 2,1 --keys 2 --tokens 2   (14)
    """
    check_seed(seed)
    metric = _weights(weights)
    arch = build_block_architecture(widths, keys, tokens, attention, heads=heads, values=values,
                                    residual=residual, mlp=mlp, activation=activation, norm=norm)
    from ..degrees.ed import ed_degree  # noqa: PLC0415  (flint and torch only when computing)
    from ..degrees.engine import check_timeout  # noqa: PLC0415

    timeout = check_timeout(timeout)
    try:   # the engine polls its deadline; the signal ends a C call it cannot poll
        with time_limit(timeout + TIMEOUT_GRACE):
            result = ed_degree(arch, n_inputs=inputs, weights=metric, seed=seed, timeout=timeout,
                               repeats=repeats, progress=stderr_progress("ed-degree"),
                               max_memory=max_memory)
    except TimeLimitReached:
        print_stopped("ed-degree", timeout, as_json, arch.to_dict(), "an ED degree was found",
                      ("ed_degree",))
        raise typer.Exit(EXIT_AMBIGUOUS) from None
    if as_json:
        print_json({"architecture": arch.to_dict(), **result.to_dict()})
    else:
        print(result)
    if result.ed_degree is None:
        raise typer.Exit(EXIT_AMBIGUOUS)
