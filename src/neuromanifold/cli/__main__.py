"""`python -m neuromanifold.cli ...` runs the command line."""

from . import main

raise SystemExit(main())
