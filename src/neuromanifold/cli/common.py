"""Helpers shared by the command modules: parsing, output checks, JSON and the stderr console."""

from __future__ import annotations

import contextlib
import json
import math
import signal
import sys
import threading
from pathlib import Path

import typer
from rich.console import Console

from ..core.architecture import Architecture
from ..core.checks import bad_value
from ..core.limits import check_output_folder

err = Console(stderr=True, highlight=False, markup=False, soft_wrap=True)

EXIT_AMBIGUOUS = 1
EXIT_BAD_INPUT = 2

# The panels of a long --help (typer's rich_help_panel), in the order a newcomer reads them:
# what network, which decoder features, how it is computed, on what, and what is printed.
NETWORK = "Network"
DECODER = "Decoder options"
METHOD = "Method"
RESOURCES = "Resources"
OUTPUT = "Output"

# The options `rank` and `fiber` take for what a weight file does not store
# (`io.weightfiles.read_network_file` applies or refuses each; None: not given).
RESIDUAL_OPTION = typer.Option(
    None, "--residual/--no-residual", help="Residual connections; required for a block file "
    "whose widths are all equal. On a file in the paper's format, --residual reads it as the "
    "one-head block network with residual paths.", rich_help_panel=NETWORK)
ACTIVATION_OPTION = typer.Option(None, help="MLP activation (square, relu, gelu or tanh); "
                                 "required for a block file with an MLP.", rich_help_panel=NETWORK)
NORM_OPTION = typer.Option(None, help="layernorm or rmsnorm; required for a block file with "
                           "norm gains.", rich_help_panel=NETWORK)
# Decoder features (docs/decoder_features.md) with the spellings of `dim`. No block stores a
# causal mask, rotary positions or parallel blocks: these options say how to read the file.
CAUSAL_OPTION = typer.Option(False, "--causal", help="Read the network with a causal mask (a "
                             "file does not store one; docs/decoder_features.md).",
                             rich_help_panel=DECODER)
POSITIONS_OPTION = typer.Option("none", help="none, learned or rope: rotary positions are not "
                                "stored, so rope reads the file with them; learned positions are "
                                "read from a block T (learned without one is refused).",
                                rich_help_panel=DECODER)
ROPE_PAIRS_OPTION = typer.Option(None, "--rope-pairs", help="With --positions rope: pairs "
                                 "R_1,...,R_l rotated per head (default all a_i // 2).",
                                 rich_help_panel=DECODER)
PARALLEL_OPTION = typer.Option(False, "--parallel", help="Read the blocks as parallel "
                               "attention + MLP (not stored; needs --residual and an MLP).",
                               rich_help_panel=DECODER)
# The others are read off the file's blocks; given, each must agree with the file.
KV_HEADS_OPTION = typer.Option(None, "--kv-heads", help="Check: key/value groups per layer "
                               "(read from the Q_i_g blocks, transformers' grouping).",
                               rich_help_panel=DECODER)
BIAS_OPTION = typer.Option(None, "--bias/--no-bias", help="Check: attention biases (read from "
                           "the bq, bk, bv, bo blocks).", rich_help_panel=DECODER)
MLP_BIAS_OPTION = typer.Option(None, "--mlp-bias/--no-mlp-bias", help="Check: MLP biases (bg, "
                               "bp, bu blocks).", rich_help_panel=DECODER)
MLP_KIND_OPTION = typer.Option(None, "--mlp-kind", help="Check: plain or gated (a G_i block).",
                               rich_help_panel=DECODER)
VOCAB_OPTION = typer.Option(None, help="Check: the vocabulary size (rows of the block E).",
                            rich_help_panel=DECODER)
TIED_OPTION = typer.Option(None, "--tied/--no-tied", help="Check: tied logits (an E without L).",
                           rich_help_panel=DECODER)
QK_NORM_OPTION = typer.Option(None, "--qk-norm/--no-qk-norm", help="Check: QK-norm (qn_i_h, "
                              "kn_i_g blocks).", rich_help_panel=DECODER)
FINAL_NORM_OPTION = typer.Option(None, "--final-norm/--no-final-norm", help="Check: a final "
                                 "norm (a block f).", rich_help_panel=DECODER)


def parse_int_list(name: str, text: str, example: str) -> tuple[int, ...]:
    """'5,3,3,5' -> (5, 3, 3, 5); anything else is a bad-input line."""
    parts = [p.strip() for p in str(text).split(",")]
    try:
        values = tuple(int(p) for p in parts)
    except ValueError:
        raise bad_value(name, "a comma-separated list of positive integers", text,
                        f"Pass e.g. --{name} {example}.") from None
    return values


def parse_per_layer(name: str, text: str, example: str) -> int | tuple[int, ...]:
    """'2,2' -> (2, 2); a single '2' -> 2, which Architecture gives to every layer."""
    values = parse_int_list(name, text, example)
    return values[0] if len(values) == 1 else values


def build_block_architecture(widths: str, keys: str, tokens: int, attention: str,
                             temperature: float = 1.0, *, heads: str | None = None,
                             values: str | None = None, residual: bool = False,
                             mlp: str | None = None, activation: str = "square",
                             norm: str = "none", causal: bool = False,
                             positions: str = "none", rope_pairs: str | None = None,
                             kv_heads: str | None = None, bias: bool = False,
                             mlp_bias: bool = False, mlp_kind: str = "plain",
                             vocab: int | None = None, tied: bool = False, qk_norm: bool = False,
                             final_norm: bool = False, parallel: bool = False) -> Architecture:
    """An Architecture with the transformer-block (and decoder) options, from CLI strings."""
    return Architecture(
        parse_int_list("widths", widths, "5,3,3,5"), parse_per_layer("keys", keys, "2,2,2"), tokens,
        attention.lower(), temperature,
        heads=None if heads is None else parse_per_layer("heads", heads, "2,2"),
        values=None if values is None else parse_per_layer("values", values, "2,2"),
        residual=residual, mlp=None if mlp is None else parse_per_layer("mlp", mlp, "3,3"),
        activation=activation.lower(), norm=norm.lower(), causal=causal,
        positions=positions.lower(),
        rope_pairs=None if rope_pairs is None else parse_per_layer("rope-pairs", rope_pairs, "1,1"),
        kv_heads=None if kv_heads is None else parse_per_layer("kv-heads", kv_heads, "1,1"),
        bias=bias, mlp_bias=mlp_bias, mlp_kind=mlp_kind.lower(), vocab=vocab, tied=tied,
        qk_norm=qk_norm, final_norm=final_norm, parallel=parallel)


def check_stored_options(arch: Architecture, *, kv_heads: str | None = None,
                         bias: bool | None = None, mlp_bias: bool | None = None,
                         mlp_kind: str | None = None, vocab: int | None = None,
                         tied: bool | None = None, qk_norm: bool | None = None,
                         final_norm: bool | None = None) -> None:
    """Refuse (one line) a decoder option that disagrees with what a weight file's blocks say
    (`arch`, as read); None: not given."""
    if kv_heads is not None:
        given = parse_per_layer("kv-heads", kv_heads, "1,1")
        given = (given,) * arch.n_layers if isinstance(given, int) else given
        if given != arch.kv_counts:
            raise bad_value("kv-heads", f"the file's key/value groups {','.join(map(str, arch.kv_counts))} "
                            "(one Q_i_g block per group)", kv_heads, "Drop --kv-heads, or pass the "
                            "file whose blocks have those groups.")
    read = {"bias": (bias, arch.bias, "bias blocks bq, bk, bv, bo"),
            "mlp-bias": (mlp_bias, arch.mlp_bias, "MLP bias blocks bg, bp, bu"),
            "mlp-kind": (None if mlp_kind is None else mlp_kind.lower(), arch.mlp_kind,
                         "a gate G_i for 'gated'"),
            "vocab": (vocab, arch.vocab, "the rows of E"),
            "tied": (tied, arch.tied, "an E without an L"),
            "qk-norm": (qk_norm, arch.qk_norm, "the gains qn_i_h, kn_i_g"),
            "final-norm": (final_norm, arch.final_norm, "the gain f")}
    for option, (given, stored, what) in read.items():
        if given is not None and given != stored:
            raise bad_value(option, f"what the file stores ({stored}: {what})", given,
                            f"Drop --{option}, or pass a file with those blocks.")


def check_output_files(paths: list[Path], force: bool) -> None:
    """Refuse, before any work, to overwrite existing files (unless --force) or to write where
    the folder cannot be created or written."""
    existing = [str(p) for p in paths if p.exists()]
    if existing and not force:
        raise bad_value("out", "a folder without earlier results", ", ".join(existing),
                        "Pass another --out folder, or --force to overwrite.")
    for folder in sorted({p.parent for p in paths}):
        check_output_folder("out", folder)


def print_json(obj) -> None:
    """One JSON document on stdout (non-finite floats become null)."""
    def clean(x):
        if isinstance(x, float) and not math.isfinite(x):
            return None
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [clean(v) for v in x]
        return x
    sys.stdout.write(json.dumps(clean(obj), indent=2) + "\n")




from ..core.limits import TimeLimitReached, set_deadline  # noqa: E402  (re-exported)


def check_timeout(timeout: object) -> float | None:
    """--timeout as a positive finite number of seconds (or None)."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or \
            not 0 < timeout < math.inf:
        raise bad_value("timeout", "a positive number of seconds", timeout,
                        "Pass e.g. --timeout 600, or leave it out for no limit.")
    return float(timeout)


@contextlib.contextmanager
def time_limit(seconds: float | None):
    """Raise TimeLimitReached when `seconds` of wall time pass inside the block (SIGALRM; the
    handler runs when Python regains control, so one long LAPACK or flint call ends first)."""
    if seconds is None or threading.current_thread() is not threading.main_thread() \
            or not hasattr(signal, "setitimer"):
        yield
        return

    def on_alarm(_signum, _frame):
        raise TimeLimitReached

    import time  # noqa: PLC0415

    previous = signal.signal(signal.SIGALRM, on_alarm)
    previous_deadline = set_deadline(time.perf_counter() + seconds)   # engines project against it
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        set_deadline(previous_deadline)


def print_stopped(command: str, seconds: float, as_json: bool, architecture: dict | None,
                  what: str = "a rank was read", fields: tuple[str, ...] = ("dimension", "rank"),
                  reason: str | None = None) -> None:
    """The result of a command stopped by --timeout: status `stopped`, no value (stdout);
    `fields` are the result's value keys, each null in --json; `reason`: a projection that
    stopped the run before the limit (`core.limits.check_projection`)."""
    why = (f"the --timeout of {seconds:g} s passed before {what}; rerun with a larger "
           "--timeout") if reason is None else f"{reason}: stopped early; rerun with a larger --timeout"
    if as_json:
        print_json({"command": command, "status": "stopped", **{f: None for f in fields},
                    "timeout": seconds, "architecture": architecture, "notes": [why]})
    else:
        print(f"{command}: no answer  [stopped: {why}]")


def text_width() -> int | None:
    """The terminal's width when stdout is one (long table values wrap to it), else None: piped
    output keeps one line per value, for grep and for scripts."""
    import shutil  # noqa: PLC0415

    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


def stderr_progress(command: str):
    """A progress callback printing '<command>: <phase> (<elapsed> s)' lines on stderr (always,
    whatever the output format: stdout carries only results)."""
    import time  # noqa: PLC0415

    start = time.perf_counter()

    def say(message: str) -> None:
        err.print(f"{command}: {message} [{time.perf_counter() - start:.1f} s]", style="dim")
    return say
