"""The house is kept tidy by a tool: ruff, pinned in the test extra, is clean on the code .ci/run
lints, with the rules pyproject.toml states."""

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINTED = ["src", "tests", "benchmarks", "scripts", "examples"]


def _pins(requirements: list[str]) -> dict[str, str]:
    return dict(m.groups() for r in requirements if (m := re.fullmatch(r"([\w.-]+)==([\w.]+)", r)))


def test_ruff_is_pinned_once_in_the_test_extra():
    """The test extra pins ruff exactly, at the version constraints.txt pins (one version)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    test_extra = _pins(project["project"]["optional-dependencies"]["test"])
    constraints = _pins([line.split("#")[0].strip() for line in
                         (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines()])
    assert "ruff" in test_extra, "the test extra must pin ruff (ruff==X)"
    assert test_extra["ruff"] == constraints["ruff"]
    lint = project["tool"]["ruff"]["lint"]
    assert {"F", "B", "ARG"} <= set(lint["select"])


def test_ruff_check_is_clean_on_what_ci_lints():
    """`ruff check src tests benchmarks scripts examples` (the .ci/run step) finds nothing, and
    the version installed is the pinned one."""
    version = subprocess.run([sys.executable, "-m", "ruff", "--version"], capture_output=True,
                             text=True, check=True).stdout.split()[-1]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert version == _pins(project["project"]["optional-dependencies"]["test"])["ruff"]
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", *LINTED], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert f".venv/bin/ruff check {' '.join(LINTED)} && .venv/bin/python -m pytest" in ci
