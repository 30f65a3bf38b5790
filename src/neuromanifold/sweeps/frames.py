"""Results as a pandas DataFrame: the one module that imports pandas (an optional dependency).

`results_frame` tabulates what the library returns: a sweep store (the rows of the report's
results.csv), the row dicts of `figure3`, `heads_experiment` or `read_results`, or result
objects with `to_row` (a `DimensionResult` per network). pandas is imported on the first call,
never at start-up, and its absence is one clear error.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from ..core.checks import bad_type


def results_frame(results: str | os.PathLike | Iterable) -> "pandas.DataFrame":  # noqa: F821
    """One row per result, as a pandas DataFrame (nullable integer columns where values are
    missing, so an unmeasured dimension is <NA>, never a float).

    `results` is a sweep store path (columns of `sweeps.report.CSV_COLUMNS`, with `difference`
    = dimension - formula; `formula` empty where no closed form is known), a list of row dicts
    (e.g. what `experiments.figure3.figure3` returns), or a list of `DimensionResult`s (their
    `to_row()`: architecture fields, dimension, method, status, gap or bounds, closed form).

    Example:
        >>> from neuromanifold import Architecture, neuromanifold_dim, results_frame
        >>> rs = [neuromanifold_dim(Architecture((d, d, d), 2, 3)) for d in (2, 3)]
        >>> frame = results_frame(rs)
        >>> list(frame["dimension"] + frame["fiber_dim"]) == list(frame["n_params"])
        True
    """
    try:
        import pandas  # noqa: PLC0415
    except ModuleNotFoundError:
        raise ModuleNotFoundError("`results_frame` needs pandas, which is not installed; "
                                  "got no module 'pandas'. Install it with `pip install pandas` "
                                  "(or the package's `test` extra).") from None
    if isinstance(results, (str, os.PathLike)):
        from .report import CSV_COLUMNS, report_rows  # noqa: PLC0415
        from .store import read_results  # noqa: PLC0415

        rows = report_rows(read_results(Path(results)))
        return pandas.DataFrame(rows, columns=list(CSV_COLUMNS)).convert_dtypes()
    if isinstance(results, dict) or not isinstance(results, Iterable):
        raise bad_type("results", "a sweep store path, a list of row dicts or a list of results",
                       type(results).__name__, "Pass e.g. results_frame('eq14_map.sqlite') or "
                       "results_frame([neuromanifold_dim(arch), ...]).")
    rows = []
    for item in results:
        if isinstance(item, dict):
            rows.append(item)
        elif hasattr(item, "to_row"):
            rows.append(item.to_row())
        else:
            raise bad_type("results", "a list of row dicts or of results with `to_row`",
                           type(item).__name__, "Pass DimensionResults, or the rows a sweep "
                           "store or an experiment returns.")
    return pandas.DataFrame(rows).convert_dtypes()
