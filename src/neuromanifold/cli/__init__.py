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
    with interrupts.process_session(ends_process=argv is None, debug=debug) as session:
        try:
            from .app import main as run  # noqa: PLC0415

            return session.end(run(argv))
        except KeyboardInterrupt:  # before the command's own boundary, or after it
            return session.end(session.interrupted())
