"""The `neuromanifold` command line: the typer app, its commands and the one error boundary.

Each command lives in its own module and is thin: parse, build, call one public function,
print. stdout carries results (a table, or JSON with --json); progress goes to stderr.
Exit codes: 0 success; 1 a computation that is ambiguous or failed (including internal
errors, which suggest --debug); 2 bad input (one line on stderr); 130 interrupted.
`--debug` anywhere on the command line shows the traceback instead of the one line.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading

import typer
from typer import Abort

try:  # recent typer vendors click
    from typer._click.exceptions import UsageError
except ImportError:  # pragma: no cover - typer on top of click
    from click.exceptions import UsageError

from ..errors import InputError, NeuromanifoldError
from . import classify, count, degree, dim, equations, fiber, figure1, figure3, heads, rank, report, sweep
from .common import EXIT_AMBIGUOUS, EXIT_BAD_INPUT

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Geometry of the function spaces (neuromanifolds) of self-attention networks.")

app.command("dim")(dim.dim)
app.command("figure3")(figure3.figure3)
app.command("heads")(heads.heads)
app.command("classify")(classify.classify)
app.command("fiber")(fiber.fiber)
app.command("figure1")(figure1.figure1)
app.command("sweep")(sweep.sweep_command)
app.command("report")(report.report_command)
app.command("rank")(rank.rank)
app.command("count")(count.count_command)
app.command("degree")(degree.degree_command)
app.command("equations")(equations.equations_command)

EXIT_INTERRUPTED = 130


def _one_line(exc: BaseException) -> str:
    return str(exc).replace("\n", " ").strip()


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: the error boundary described in the module docstring."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    args = [a for a in args if a != "--debug"] or ["--help"]
    interrupted: list[int] = []
    try:
        with _interrupts_recorded(interrupted):
            code = app(args=args, prog_name="neuromanifold", standalone_mode=False)
    except UsageError as exc:
        if debug:
            raise
        print(f"neuromanifold: error: {_one_line(exc.format_message())} (see --help)", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (Abort, KeyboardInterrupt):
        print(_INTERRUPTED, file=sys.stderr)
        return EXIT_INTERRUPTED
    except InputError as exc:
        if debug:
            raise
        print(f"neuromanifold: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except NeuromanifoldError as exc:
        if debug:
            raise
        print(f"neuromanifold: {_one_line(exc)}", file=sys.stderr)
        return EXIT_AMBIGUOUS
    except Exception as exc:  # noqa: BLE001 - the boundary: anything else is a bug, not bad input
        if debug:
            raise
        print(f"neuromanifold: internal error ({type(exc).__name__}: {_one_line(exc)}); "
              "rerun with --debug for the traceback", file=sys.stderr)
        return EXIT_AMBIGUOUS
    if interrupted:  # typer turns KeyboardInterrupt into a silent exit code 130
        print(_INTERRUPTED, file=sys.stderr)
        return EXIT_INTERRUPTED
    return code if isinstance(code, int) else 0


_INTERRUPTED = "neuromanifold: interrupted; results already written are kept"


@contextlib.contextmanager
def _interrupts_recorded(record: list[int]):
    """Note every SIGINT in `record` (then raise KeyboardInterrupt as Python does), so that `main`
    can say it was interrupted even where a library swallowed the KeyboardInterrupt. A SIGINT
    that was ignored when the process started (a background job) stays ignored."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return

    def on_sigint(signum, _frame):
        record.append(signum)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


if __name__ == "__main__":
    raise SystemExit(main())
