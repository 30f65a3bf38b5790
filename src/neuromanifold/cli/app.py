"""The `neuromanifold` command line: the typer app, its commands and the one error boundary.

Each command lives in its own module and is thin: parse, build, call one public function,
print. stdout carries results (a table, or JSON with --json); progress goes to stderr.
Exit codes: 0 success; 1 a computation that is ambiguous or failed (including internal
errors, which suggest --debug); 2 bad input (one line on stderr); 130 interrupted.
`--debug` anywhere on the command line shows the traceback instead of the one line.
"""

from __future__ import annotations

import importlib
import os
import sys
import types

import typer
from typer import Abort

try:  # recent typer vendors click
    from typer._click.exceptions import UsageError
except ImportError:  # pragma: no cover - typer on top of click
    from click.exceptions import UsageError

from ..errors import InputError, NeuromanifoldError
from . import interrupts
from . import canonical, classify, count, degree, dim, eddegree, equations, fiber, figure1, figure3, heads, rank, report, sweep, track
from .common import EXIT_AMBIGUOUS, EXIT_BAD_INPUT

# Shell completion is typer's own (`--install-completion`, `--show-completion` and the
# `_NEUROMANIFOLD_COMPLETE` protocol; docs/cli.md): typer.main imports its modules whether or
# not it is on, and its two options cost about half a millisecond to build; a Tab skips
# typer's pydantic coercion (NOTE: [a Tab without pydantic]).
app = typer.Typer(no_args_is_help=True,
                  help="Geometry of the function spaces (neuromanifolds) of self-attention networks.")

# One example per command, shown at the end of its --help and in docs/cli.md.
EXAMPLES = {
    "dim": "neuromanifold dim --widths 3,3,3 --keys 2 --tokens 3",
    "figure3": "neuromanifold figure3 --attention lightning --deltas 3,4 --out figure3",
    "heads": "neuromanifold heads --widths 3,3 --keys 2 --values 3 --max-heads 2 --out heads",
    "classify": "neuromanifold classify --weights layer.npz --tokens 3",
    "fiber": "neuromanifold fiber --weights a.npz --other b.npz --tokens 3",
    "figure1": "neuromanifold figure1 --out figure1",
    "sweep": "neuromanifold sweep eq14_map --db eq14_map.sqlite --jobs 2",
    "report": "neuromanifold report eq14_map.sqlite --out eq14_report",
    "rank": "neuromanifold rank --weights weights.npz --method auto",
    "count": "neuromanifold count --model-type gpt2",
    "degree": "neuromanifold degree --widths 2,1 --keys 2 --tokens 3",
    "equations": "neuromanifold equations --widths 2,1 --keys 2 --tokens 3",
    "ed-degree": "neuromanifold ed-degree --widths 2,1 --keys 2 --tokens 2",
    "track": "neuromanifold track runs/gpt2 --tokens 3 --out rows.csv --figure track.png",
    "canonical": "neuromanifold canonical runs/gpt2 -o runs/gpt2-canonical",
    "same-function": "neuromanifold same-function runs/a runs/b --align runs/b-aligned",
}


def _command(name: str, function) -> None:
    app.command(name, epilog=f"Example: {EXAMPLES[name]}")(function)


for _name, _function in (("dim", dim.dim), ("figure3", figure3.figure3), ("heads", heads.heads),
                         ("classify", classify.classify), ("fiber", fiber.fiber),
                         ("figure1", figure1.figure1), ("sweep", sweep.sweep_command),
                         ("report", report.report_command), ("rank", rank.rank),
                         ("count", count.count_command), ("degree", degree.degree_command),
                         ("equations", equations.equations_command),
                         ("ed-degree", eddegree.ed_degree_command),
                         ("track", track.track_command),
                         ("canonical", canonical.canonical_command),
                         ("same-function", canonical.same_function_command)):
    _command(_name, _function)


def _show_version(value: bool) -> None:
    if value:
        from .. import __version__  # noqa: PLC0415

        print(f"neuromanifold {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", is_eager=True, callback=_show_version,
                                 help="Print the version and exit."),
    debug: bool = typer.Option(False, "--debug", help="Show the full traceback instead of a "
                               "one-line error (allowed anywhere on the command line)."),
) -> None:
    """Geometry of the function spaces (neuromanifolds) of self-attention networks."""


def _flags_without_metavar() -> None:
    """Typer's help panel prints a `<bool>` type after on/off flags, which take no value: show
    none (the plain help record already leaves it out)."""
    from typer.core import TyperOption  # noqa: PLC0415

    shown = TyperOption.display_type_rich
    if getattr(shown, "_neuromanifold", False):
        return

    def display_type_rich(self, ctx):
        return None if self.is_flag else shown(self, ctx)

    display_type_rich._neuromanifold = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_flags_without_metavar()

# NOTE: [a Tab without pydantic]
# A shell's completion request (its script sets COMPLETE_VAR, typer's protocol) parses the words
# typed so far resiliently and uses none of their values, yet typer 0.29 coerces each value
# through a pydantic TypeAdapter, whose import was half of a Tab's time (about 0.4 of 0.8 s on a
# loaded 2-core machine). For a completion request alone, the options and arguments keep their
# values as typed and run no callback (`--version <Tab>` would print the version); a command run
# is untouched.
COMPLETE_VAR = "_NEUROMANIFOLD_COMPLETE"


def _complete_without_coercion() -> None:
    """Let resilient parsing (completion only) skip typer's value coercion (NOTE above)."""
    from typer.core import TyperArgument, TyperOption  # noqa: PLC0415

    for cls in (TyperArgument, TyperOption):
        coerce = cls.process_value
        if getattr(coerce, "_neuromanifold", False):
            continue

        def process_value(self, ctx, value, _coerce=coerce):
            return value if ctx.resilient_parsing else _coerce(self, ctx, value)

        process_value._neuromanifold = True  # type: ignore[attr-defined]
        cls.process_value = process_value  # type: ignore[method-assign]


# NOTE: [help without markdown-it and pygments]
# typer's rich help (`typer.rich_utils`) imports rich.markdown (markdown-it) and rich.traceback
# (pygments) when it is first imported, about a third of `--help`'s wall time, yet uses them
# only in markdown markup mode and in its pretty tracebacks, neither of which this app shows.
# For a help request, rich_utils is imported with stand-ins for the two classes; a stand-in
# that is ever called builds the real object (importing its module then). The stand-in
# modules are removed from sys.modules at once, so any later import gets the real modules.

def _stand_in(module: str, name: str) -> type:
    """A class whose construction (or `from_exception`) returns the real `module.name`'s."""
    def real():
        return getattr(importlib.import_module(module), name)

    def new(_cls, *args, **kwargs):
        return real()(*args, **kwargs)

    return type(name, (), {"__new__": new, "from_exception": staticmethod(
        lambda *args, **kwargs: real().from_exception(*args, **kwargs))})


def _light_rich_help() -> None:
    """Import typer's rich help module with stand-ins for markdown and tracebacks (NOTE above)."""
    if "typer.rich_utils" in sys.modules:
        return
    stand_ins = {"rich.markdown": "Markdown", "rich.traceback": "Traceback"}
    missing = [m for m in stand_ins if m not in sys.modules]
    for module in missing:
        stub = types.ModuleType(module)
        setattr(stub, stand_ins[module], _stand_in(module, stand_ins[module]))
        sys.modules[module] = stub
    try:
        importlib.import_module("typer.rich_utils")
    finally:
        for module in missing:
            del sys.modules[module]

EXIT_INTERRUPTED = interrupts.EXIT_INTERRUPTED
_INTERRUPTED = interrupts.INTERRUPTED
_interrupts_recorded = interrupts.interrupts_recorded
_mute_reports = interrupts.mute_reports


def _one_line(exc: BaseException) -> str:
    return str(exc).replace("\n", " ").strip()


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: the error boundary described in the module docstring.

    An error of any kind after a SIGINT is the interruption it follows (a Ctrl-C that a library
    swallowed leaves half-made state that fails later): one line, exit 130 (`cli.interrupts`).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    args = [a for a in args if a != "--debug"] or ["--help"]
    # A shell's completion request has no arguments (so it takes the light help too, whose
    # rich_utils renders zsh's and fish's command descriptions) and is answered before they are read.
    if "--help" in args:
        _light_rich_help()
    if os.environ.get(COMPLETE_VAR):
        _complete_without_coercion()
    interrupted: list[int] = []
    keep_reports = debug or argv is not None
    try:
        with _interrupts_recorded(interrupted, mute=not keep_reports):
            code = app(args=args, prog_name="neuromanifold", standalone_mode=False)
    except (Abort, KeyboardInterrupt):
        return _interrupted(keep_reports)
    except UsageError as exc:
        if interrupted and not debug:
            return _interrupted(keep_reports)
        if debug:
            raise
        message = _one_line(exc.format_message())
        hint = _spaced_list_hint(args) if "extra argument" in message else None
        message = hint or f"{message} (see --help)"
        print(f"neuromanifold: error: {message}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except InputError as exc:
        if interrupted and not debug:
            return _interrupted(keep_reports)
        if debug:
            raise
        print(f"neuromanifold: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except NeuromanifoldError as exc:
        if interrupted and not debug:
            return _interrupted(keep_reports)
        if debug:
            raise
        print(f"neuromanifold: {_one_line(exc)}", file=sys.stderr)
        return EXIT_AMBIGUOUS
    except Exception as exc:  # noqa: BLE001 - the boundary: anything else is a bug, not bad input
        if interrupted and not debug:
            return _interrupted(keep_reports)
        if debug:
            raise
        print(f"neuromanifold: internal error ({type(exc).__name__}: {_one_line(exc)}); "
              "rerun with --debug for the traceback", file=sys.stderr)
        return EXIT_AMBIGUOUS
    # typer turns a KeyboardInterrupt into a silent exit code 130 (no command returns 130)
    if interrupted or code == EXIT_INTERRUPTED:
        return _interrupted(keep_reports)
    return code if isinstance(code, int) else 0


def _interrupted(keep_reports: bool) -> int:
    """Say the interrupted line (`interrupts.interrupted_line`: `_INTERRUPTED`, or what the
    command kept) and silence the teardown that follows, unless --debug or `main` was called
    with its arguments (from Python, whose process goes on: `keep_reports`;
    `interrupts.mute_reports`)."""
    return interrupts.say_interrupted(keep_reports)


def _spaced_list_hint(args: list[str]) -> str | None:
    """`--widths 3 2 3` -> the template line suggesting `--widths 3,2,3`; None when no option
    is followed by more than one bare number (then the parser's own message stands)."""
    def number(text: str) -> bool:
        return text.rstrip(",").replace(".", "", 1).isdigit()

    for i, arg in enumerate(args):
        if not arg.startswith("--") or "=" in arg:
            continue
        values = []
        for value in args[i + 1:]:
            if not number(value):
                break
            values.append(value.rstrip(","))
        if len(values) > 1:
            name = arg[2:]
            return (f"`{name}` must be one comma-separated list; got {' '.join(values)!r}. "
                    f"Pass --{name} {','.join(values)} (commas, no spaces).")
    return None


if __name__ == "__main__":
    raise SystemExit(main())
