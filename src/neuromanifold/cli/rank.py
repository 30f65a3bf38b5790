"""`neuromanifold rank`: The Jacobian rank at given weights, and the generic dimension.

The weights are the project's own weight file (`--weights FILE`, or FILE as PATH), or a
checkpoint (PATH: a `save_pretrained` folder or a hub name in the local Hugging Face cache,
docs/checkpoints.md), whose config says its architecture: the options that describe one are
refused for it."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .common import (ACTIVATION_OPTION, BIAS_OPTION, CAUSAL_OPTION, EXIT_AMBIGUOUS,
                     FINAL_NORM_OPTION, KV_HEADS_OPTION, MLP_BIAS_OPTION, MLP_KIND_OPTION,
                     NORM_OPTION, PARALLEL_OPTION, POSITIONS_OPTION, QK_NORM_OPTION,
                     RESIDUAL_OPTION, ROPE_PAIRS_OPTION, TIED_OPTION, VOCAB_OPTION,
                     TimeLimitReached, check_stored_options, check_timeout, err, parse_per_layer,
                     print_json, print_stopped, time_limit)
from .common import METHOD, NETWORK, OUTPUT, RESOURCES  # the --help panels
from ..core.checks import bad_value


# Options that describe an architecture: a weight file's, never a checkpoint's (its config says).
_ARCHITECTURE_OPTIONS = ("attention", "residual", "activation", "norm", "causal", "positions",
                         "rope_pairs", "parallel", "kv_heads", "bias", "mlp_bias", "mlp_kind",
                         "vocab", "tied", "qk_norm", "final_norm")


def rank(
    ctx: typer.Context,
    path: Optional[str] = typer.Argument(None, show_default=False, help="A checkpoint: a folder "
                                         "as save_pretrained writes it (or a checkpoint-<step> "
                                         "folder of a training run), a hub name in the local "
                                         "Hugging Face cache, or the project's own .npz weight "
                                         "file (as --weights); docs/checkpoints.md."),
    weights: Optional[Path] = typer.Option(None, help=".npz of Q_i, K_i, V_i (or A_i, V_i), or a "
                                           "block file (Q_1_1, ..., docs/blocks.md; decoder "
                                           "blocks, docs/decoder_features.md), as `fiber` reads.",
                                           rich_help_panel=NETWORK),
    tokens: int = typer.Option(3, help="Number of tokens t.", rich_help_panel=NETWORK),
    attention: str = typer.Option("lightning", help="lightning or softmax.",
                                  rich_help_panel=NETWORK),
    residual: Optional[bool] = RESIDUAL_OPTION,
    activation: Optional[str] = ACTIVATION_OPTION,
    norm: Optional[str] = NORM_OPTION,
    causal: bool = CAUSAL_OPTION,
    positions: str = POSITIONS_OPTION,
    rope_pairs: Optional[str] = ROPE_PAIRS_OPTION,
    parallel: bool = PARALLEL_OPTION,
    kv_heads: Optional[str] = KV_HEADS_OPTION,
    bias: Optional[bool] = BIAS_OPTION,
    mlp_bias: Optional[bool] = MLP_BIAS_OPTION,
    mlp_kind: Optional[str] = MLP_KIND_OPTION,
    vocab: Optional[int] = VOCAB_OPTION,
    tied: Optional[bool] = TIED_OPTION,
    qk_norm: Optional[bool] = QK_NORM_OPTION,
    final_norm: Optional[bool] = FINAL_NORM_OPTION,
    hidden_state: bool = typer.Option(False, "--hidden-state", help="A checkpoint's base model's "
                                      "last hidden state (after its final norm) instead of its "
                                      "logits, as count --validate --hidden-state has it.",
                                      rich_help_panel=NETWORK),
    method: str = typer.Option("auto", help="auto (float64, escalated to a proof on a thin gap or "
                               "a rank below the upper bound), numerical or certified.",
                               rich_help_panel=METHOD),
    samples: Optional[int] = typer.Option(None, help="Input samples N (default: 3 n_params rows).",
                                          rich_help_panel=METHOD),
    seed: int = typer.Option(0, help="Random seed for the inputs.", rich_help_panel=METHOD),
    precision: Optional[int] = typer.Option(None, help="Starting bits of the ball arithmetic "
                                            "(default 128, doubled up to 1024).",
                                            rich_help_panel=METHOD),
    engine: str = typer.Option("verified", help="Lower-bound engine of the proof: verified (the "
                               "verified float64 certificate first, arb balls where floats "
                               "cannot separate) or ball (arb balls only, to cross-check it).",
                               rich_help_panel=METHOD),
    inputs: Optional[Path] = typer.Option(None, "--inputs", help="A checkpoint's token ids (.npy "
                                          "or .pt, integers of shape (N, t) in [0, vocab)): the "
                                          "rank on your own data.", rich_help_panel=METHOD),
    generic: bool = typer.Option(True, help="Also compute the generic dimension of the architecture.",
                                 rich_help_panel=METHOD),
    timeout: Optional[float] = typer.Option(None, help="Seconds of wall time; past them the "
                                            "computation stops with status `stopped` and exit "
                                            "code 1.", rich_help_panel=RESOURCES),
    as_json: bool = typer.Option(False, "--json", help="One JSON object on stdout.",
                                 rich_help_panel=OUTPUT),
) -> None:
    """Jacobian rank at the given weights (their local functional dimension), with the generic dimension."""
    timeout = check_timeout(timeout)
    if path is not None and weights is not None:
        raise bad_value("weights", "left out when PATH is given", str(weights),
                        "Pass the weight file or checkpoint once: as PATH or as --weights.")
    if path is None and weights is None:
        raise bad_value("PATH", "a checkpoint folder, a cached hub name or a weight file",
                        "neither PATH nor --weights", "Pass e.g. neuromanifold rank "
                        "path/to/checkpoint --tokens 4, or --weights weights.npz.")
    if weights is None and not (Path(path).suffix == ".npz" and Path(path).is_file()):
        _checkpoint_rank(ctx, path, tokens=tokens, method=method, samples=samples, seed=seed,
                         precision=precision, hidden_state=hidden_state, inputs=inputs,
                         generic=generic, as_json=as_json, timeout=timeout, engine=engine)
        return
    weights = Path(path) if weights is None else weights
    for option, given in (("hidden-state", hidden_state or None), ("inputs", inputs)):
        if given is not None:
            raise bad_value(option, "left out for a weight file (it reads a checkpoint: a "
                            "save_pretrained folder)", str(given), f"Drop --{option}.")
    from ..dimension.point import rank_at_point  # noqa: PLC0415
    from ..io.weightfiles import read_network_file  # noqa: PLC0415

    data = read_network_file(weights, tokens=tokens, attention=attention.lower(), residual=residual,
                             activation=activation and activation.lower(),
                             norm=norm and norm.lower(), causal=causal,
                             positions=positions.lower(),
                             rope_pairs=None if rope_pairs is None else parse_per_layer(
                                 "rope-pairs", rope_pairs, "1,1"),
                             parallel=parallel, name="weights")
    check_stored_options(data.arch, kv_heads=kv_heads, bias=bias, mlp_bias=mlp_bias,
                         mlp_kind=mlp_kind, vocab=vocab, tied=tied, qk_norm=qk_norm,
                         final_norm=final_norm)
    arch, point = data.arch, data.point
    progress = None if as_json else (lambda msg: err.print(msg, style="dim"))
    try:
        with time_limit(timeout):
            result = rank_at_point(arch, point, method=method.lower(), samples=samples,
                                   seed=seed, precision=precision, generic=generic,
                                   progress=progress, engine=engine)
    except TimeLimitReached:
        print_stopped("rank", timeout, as_json, arch.to_dict())
        raise typer.Exit(EXIT_AMBIGUOUS) from None
    if as_json:
        print_json({"read_as": data.to_dict(), **result.to_dict()})
    else:
        print(f"read as  {data.arch}  [{data.reading}]")
        print(result.summary())
    if not result.is_settled:
        raise typer.Exit(EXIT_AMBIGUOUS)


def _checkpoint_rank(ctx: typer.Context, source: str, *, tokens: int, method: str,
                     samples: Optional[int], seed: int, precision: Optional[int],
                     hidden_state: bool, inputs: Optional[Path], generic: bool, as_json: bool,
                     timeout: Optional[float], engine: str = "verified") -> None:
    """`rank PATH` for a checkpoint: read it (`load_checkpoint`), analyse it at its weights
    (`analyse_checkpoint`), print `read_as` and the result."""
    for name in _ARCHITECTURE_OPTIONS:
        given = ctx.get_parameter_source(name)   # click's ParameterSource: DEFAULT unless typed
        if given is not None and given.name not in ("DEFAULT", "DEFAULT_MAP"):
            option = "--" + name.replace("_", "-")
            raise bad_value(option.lstrip("-"), "left out for a checkpoint (its config.json says "
                            "the architecture)", ctx.params[name], f"Drop {option}.")
    from ..io.checkpoints import read_token_ids  # noqa: PLC0415
    from ..models.checkpoint import analyse_checkpoint, load_checkpoint  # noqa: PLC0415

    ids = None if inputs is None else read_token_ids(inputs)
    checkpoint = load_checkpoint(source, tokens, output="hidden" if hidden_state else "logits")
    progress = None if as_json else (lambda msg: err.print(msg, style="dim"))
    try:
        with time_limit(timeout):
            result = analyse_checkpoint(checkpoint, inputs=ids, method=method.lower(),
                                        samples=samples, seed=seed, precision=precision,
                                        generic=generic, progress=progress, engine=engine)
    except TimeLimitReached:
        print_stopped("rank", timeout, as_json, checkpoint.arch.to_dict())
        raise typer.Exit(EXIT_AMBIGUOUS) from None
    if as_json:
        print_json({"read_as": checkpoint.to_dict(), **result.to_dict()})
    else:
        step = "" if checkpoint.step is None else f", step {checkpoint.step}"
        print(f"read as  {checkpoint.arch}  [{checkpoint.family} checkpoint ({checkpoint.layout}, "
              f"{checkpoint.dtype}{step}), {checkpoint.output}: {checkpoint.source}]")
        print(result.summary())
    if not result.is_settled:
        raise typer.Exit(EXIT_AMBIGUOUS)
