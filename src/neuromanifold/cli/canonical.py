"""`neuromanifold canonical` and `neuromanifold same-function`: one representative per orbit
of a checkpoint's weights, and whether two checkpoints compute the same function
(docs/canonical.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .common import EXIT_AMBIGUOUS, print_json


def _say(command: str):
    from .common import stderr_progress  # noqa: PLC0415

    say = stderr_progress(command)
    return lambda message: say(message.split(": ", 1)[-1])


def canonical_command(
    checkpoint: str = typer.Argument(..., help="A checkpoint of a converted family: a folder as "
                                     "save_pretrained writes it, or a hub name in the local "
                                     "Hugging Face cache."),
    out: Path = typer.Option(..., "--out", "-o", help="The folder to write the canonical "
                             "checkpoint to (refused if it exists, unless --force)."),
    force: bool = typer.Option(False, help="Replace an existing --out folder."),
    hidden_state: bool = typer.Option(False, "--hidden-state", help="The base model's last "
                                      "hidden state is the function kept (the final norm's gain "
                                      "is then not folded); default: the logits."),
    seed: int = typer.Option(0, help="Seed of the random token sequences of the check."),
    tolerance: Optional[float] = typer.Option(None, help="Largest relative output difference the "
                                              "check accepts (default by dtype: 1e-10 float64, "
                                              "1e-4 float32, 5e-2 float16/bfloat16)."),
    as_json: bool = typer.Option(False, "--json", help="One JSON document on stdout."),
) -> None:
    """Write the canonical representative of a checkpoint's orbit under its symmetry group.

    Gains folded, biases moved, QK and OV gauges in balanced SVD form (the rotary commutant
    under rotary positions), heads, groups and neurons sorted: the result is loaded again by
    transformers and must give the original's outputs (an error otherwise, exit 1).
    """
    from ..models.canonical import canonical  # noqa: PLC0415

    result = canonical(checkpoint, out, force=force, output="hidden" if hidden_state else "logits",
                       seed=seed, tolerance=tolerance, progress=_say("canonical"))
    document = result.to_dict()
    if as_json:
        print_json(document)
        return
    print(f"canonical {result.family} checkpoint of {result.source} ({result.dtype}, "
          f"{result.moves} moves) written to {out}")
    print(f"  check: outputs through transformers differ by {result.check_difference:.1e} "
          f"(relative, tolerance {result.tolerance:.0e})")
    print(f"  quotiented: {', '.join(document['quotiented'])}")
    if result.not_quotiented:
        print(f"  not quotiented: {', '.join(result.not_quotiented)}")
    for note in result.notes:
        print(f"  note: {note}")


def same_function_command(
    a: str = typer.Argument(..., help="Checkpoint A (a save_pretrained folder or a cached hub "
                            "name)."),
    b: str = typer.Argument(..., help="Checkpoint B, of the same config as A."),
    align: Optional[Path] = typer.Option(None, help="Write B moved into A's gauge (permutations "
                                         "by assignment, orthogonal gauges by Procrustes) to this "
                                         "folder, for merging."),
    force: bool = typer.Option(False, help="Replace an existing --align folder."),
    hidden_state: bool = typer.Option(False, "--hidden-state", help="Compare the base models' "
                                      "last hidden states instead of the logits."),
    tolerance: Optional[float] = typer.Option(None, help="Largest relative difference of the "
                                              "canonical forms called the same (default by "
                                              "dtype: 1e-8 float64, 1e-4 float32)."),
    seed: int = typer.Option(0, help="Seed of the random token sequences compared."),
    as_json: bool = typer.Option(False, "--json", help="One JSON document on stdout."),
) -> None:
    """Whether two checkpoints of one config compute the same function up to the symmetry group.

    same: the canonical forms agree within the tolerance; different: the outputs on random
    sequences differ (exit 0 either way); undecided: equal outputs, different canonical forms
    (a symmetry that is not quotiented may relate them; exit 1).
    """
    from ..models.canonical import same_function  # noqa: PLC0415

    result = same_function(a, b, tolerance=tolerance, align=align, force=force,
                           output="hidden" if hidden_state else "logits", seed=seed,
                           progress=_say("same-function"))
    if as_json:
        print_json(result.to_dict())
    else:
        print(f"same function: {result.verdict} (canonical forms differ by "
              f"{result.max_difference:.1e} relative, largest in {result.where or '-'}; outputs "
              f"by {result.output_difference:.1e}; tolerance {result.tolerance:.0e})")
        if result.verdict == "undecided":
            print("  the outputs agree but the canonical forms do not; not quotiented: "
                  + ", ".join(result.not_quotiented))
        if result.aligned is not None:
            print(f"  B in A's gauge written to {result.aligned['out']}: relative difference to A "
                  f"{result.aligned['before']:.2e} -> {result.aligned['after']:.2e} (check "
                  f"{result.aligned['check']:.1e})")
    if result.verdict == "undecided":
        raise typer.Exit(EXIT_AMBIGUOUS)
