"""`neuromanifold degree`: the degree of the neurovariety of a polynomial network."""

from __future__ import annotations

from typing import Optional

import typer

from ..core.checks import check_seed
from .common import (EXIT_AMBIGUOUS, TimeLimitReached, build_block_architecture, print_json,
                     print_stopped, stderr_progress, time_limit)
from .common import METHOD, NETWORK, OUTPUT, RESOURCES  # the --help panels

# Seconds past --timeout at which the signal-based limit ends a phase the engine cannot poll
# (the exact engine's dimension); the engine's own deadline normally stops the run first.
TIMEOUT_GRACE = 2.0
MAX_MEMORY_HELP = ("Refuse (exit 2) when the estimated peak of a phase exceeds this: 16G, 500M, "
                   "or a fraction such as 0.5 of the available memory (default 0.8); every "
                   "phase is estimated before any work.")


def degree_command(
    widths: str = typer.Option(..., help="Widths d_0,...,d_l, e.g. 2,1.", rich_help_panel=NETWORK),
    keys: str = typer.Option(..., help="Key widths a_1,...,a_l, e.g. 2.", rich_help_panel=NETWORK),
    tokens: int = typer.Option(3, help="Number of tokens t.", rich_help_panel=NETWORK),
    attention: str = typer.Option("lightning", help="lightning (softmax has no degree: refused).",
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
    repeats: int = typer.Option(2, help="Independent slices per prime (two primes near 2^30).",
                                rich_help_panel=METHOD),
    seed: int = typer.Option(0, help="Random seed for the gauge points, slices and inputs.",
                             rich_help_panel=METHOD),
    route: str = typer.Option("direct", help="direct (slices of the network map), structure "
                              "(deg W / e_L through the Segre / virtual-weight structure, every "
                              "hypothesis checked: docs/degree.md; one plain layer, or two with "
                              "d_1 = d_2 = 1 or d_1 >= d_0), or both (structure, then the direct "
                              "count on the time left as a cross-check).", rich_help_panel=METHOD),
    timeout: float = typer.Option(600.0, help="Seconds of wall time for the whole run (the "
                                  "dimension, the span, the inputs, the gauge and the solves); "
                                  "past it the result is stopped (exit 1), never guessed.",
                                  rich_help_panel=RESOURCES),
    max_memory: Optional[str] = typer.Option(None, help=MAX_MEMORY_HELP, rich_help_panel=RESOURCES),
    as_json: bool = typer.Option(False, "--json", help="One JSON object on stdout.",
                                 rich_help_panel=OUTPUT),
) -> None:
    """Degree of the neurovariety of a polynomial network, exact over F_p (randomised).

    Example: neuromanifold degree --widths 2,1 --keys 2 --tokens 3   (Figure 1's quartic: 4)
    """
    check_seed(seed)
    arch = build_block_architecture(widths, keys, tokens, attention, heads=heads, values=values,
                                    residual=residual, mlp=mlp, activation=activation, norm=norm)
    from ..degrees.engine import check_timeout  # noqa: PLC0415
    from ..degrees.network import degree  # noqa: PLC0415  (flint and torch only when computing)

    timeout = check_timeout(timeout)
    if route not in ("direct", "structure", "both"):
        from ..core.checks import bad_value  # noqa: PLC0415

        raise bad_value("route", "direct, structure or both", route, "Pass --route structure.")
    try:
        with time_limit(timeout + TIMEOUT_GRACE):
            if route == "direct":
                result = degree(arch, seed=seed, timeout=timeout, repeats=repeats,
                                progress=stderr_progress("degree"), max_memory=max_memory)
            else:
                from ..degrees.structure import structured_degree  # noqa: PLC0415

                result = structured_degree(arch, seed=seed, timeout=timeout, repeats=repeats,
                                           progress=stderr_progress("degree"),
                                           max_memory=max_memory, cross_check=route == "both")
    except TimeLimitReached:
        print_stopped("degree", timeout, as_json, arch.to_dict(), "a degree was found",
                      ("degree",))
        raise typer.Exit(EXIT_AMBIGUOUS) from None
    if as_json:
        print_json({"architecture": arch.to_dict(), **result.to_dict()})
    else:
        print(result)
    if result.degree is None:
        raise typer.Exit(EXIT_AMBIGUOUS)
