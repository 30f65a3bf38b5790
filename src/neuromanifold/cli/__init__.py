"""The command line. `main` is the console-script entry point (see `cli.app`)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Run the `neuromanifold` command line with `argv` (default: sys.argv[1:]).

    Ctrl-C is handled from here on, before the command line's own imports (`cli.interrupts`):
    at any moment it gives one line and exit code 130.
    """
    from . import interrupts  # noqa: PLC0415  (standard library only)

    debug = "--debug" in (sys.argv[1:] if argv is None else argv)
    as_program = sys._getframe(1).f_globals.get("__name__") == "__main__"
    with interrupts.process_session(argv is not None, debug, as_program) as session:
        try:
            from .app import main as run  # noqa: PLC0415

            return session.end(run(argv))
        except KeyboardInterrupt:  # before the command's own boundary, or after it
            return session.end(session.interrupted())
