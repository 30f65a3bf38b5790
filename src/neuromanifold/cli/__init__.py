"""The command line. `main` is the console-script entry point (see `cli.app`)."""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    """Run the `neuromanifold` command line with `argv` (default: sys.argv[1:])."""
    from .app import main as run  # noqa: PLC0415

    return run(argv)
