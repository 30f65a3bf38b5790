"""`neuromanifold equations`: lowest-degree implicit equations of a small neurovariety."""

from __future__ import annotations

from typing import Optional

import typer

from ..core.checks import check_seed
from .common import (EXIT_AMBIGUOUS, TimeLimitReached, build_block_architecture, check_timeout,
                     print_json, print_stopped, stderr_progress, time_limit)
from .common import METHOD, NETWORK, OUTPUT, RESOURCES  # the --help panels
from .degree import MAX_MEMORY_HELP, TIMEOUT_GRACE


def equations_command(
    widths: str = typer.Option(..., help="Widths d_0,...,d_l, e.g. 2,1.", rich_help_panel=NETWORK),
    keys: str = typer.Option(..., help="Key widths a_1,...,a_l, e.g. 2.", rich_help_panel=NETWORK),
    tokens: int = typer.Option(3, help="Number of tokens t.", rich_help_panel=NETWORK),
    attention: str = typer.Option("lightning", help="lightning (softmax is not algebraic: refused).",
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
    max_degree: int = typer.Option(4, help="Highest degree k tried.", rich_help_panel=METHOD),
    max_monomials: int = typer.Option(3000, help="Stop at a degree with more monomials than this.",
                                      rich_help_panel=METHOD),
    seed: int = typer.Option(0, help="Random seed for the interpolation and check points.",
                             rich_help_panel=METHOD),
    timeout: Optional[float] = typer.Option(None, help="Seconds of wall time for the whole run "
                                            "(the span, the interpolation, the lift and the "
                                            "check); past it the result is stopped (exit 1).",
                                            rich_help_panel=RESOURCES),
    max_memory: Optional[str] = typer.Option(None, help=MAX_MEMORY_HELP, rich_help_panel=RESOURCES),
    as_json: bool = typer.Option(False, "--json", help="One JSON object on stdout.",
                                 rich_help_panel=OUTPUT),
) -> None:
    """Hilbert function and lowest-degree equations of a neurovariety, exact over Q.

    Example: neuromanifold equations --widths 2,1 --keys 2 --tokens 3   (Figure 1's quartic)
    """
    check_seed(seed)
    arch = build_block_architecture(widths, keys, tokens, attention, heads=heads, values=values,
                                    residual=residual, mlp=mlp, activation=activation, norm=norm)
    from ..degrees.equations import implicit_equations  # noqa: PLC0415

    timeout = check_timeout(timeout)
    try:
        with time_limit(None if timeout is None else timeout + TIMEOUT_GRACE):
            result = implicit_equations(arch, max_degree=max_degree, seed=seed,
                                        max_monomials=max_monomials, timeout=timeout,
                                        max_memory=max_memory,
                                        progress=stderr_progress("equations"))
    except TimeLimitReached:
        print_stopped("equations", timeout, as_json, arch.to_dict(), "the equations were found",
                      ("lowest_degree", "equations"))
        raise typer.Exit(EXIT_AMBIGUOUS) from None
    if as_json:
        print_json(result.to_dict())
    else:
        print(result)
    if result.status == "stopped" or (result.lowest_degree is not None and not result.verified):
        raise typer.Exit(EXIT_AMBIGUOUS)
