"""The local geometry along a training run: one analysed checkpoint per step (docs/tracking.md).

`track` lists a run's checkpoints (`io.runs.list_checkpoints`), analyses each one with an
injectable `analyse(path) -> dict` (by default `models.checkpoint.checkpoint_rank` at the given
tokens, output, inputs, method and seed, imported when first called), and keeps one row per step
in an SQLite store as soon as that step is done, so an interrupted run continues where it
stopped. Every number of a row is copied from the analysis, never recomputed here: the bracket
`lower_bound <= rank at the point <= upper_bound` (exact F_p upper bound, certified lower bound
where the size allowed), the rank and its `status` (a rank is only read where the status says
`settled` or `certified`), the effective dimensions at stated relative tolerances, the generic
dimension, and the excess of the point and of each part.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import pickle
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..core.checks import bad_value, check_choice, check_int, check_seed
from ..dimension.result import SETTLED_STATUSES
from ..io.runs import (check_has_weights, check_same_options, check_same_run, check_track_store,
                       default_store, insert_row, list_checkpoints, open_track_store, stored_rows)

OUTPUTS = ("logits", "hidden")
TRACK_METHODS = ("auto", "numerical", "certified")
# the analysis' keys a row carries as they are (docs/tracking.md)
ROW_KEYS = ("n_params", "lower_bound", "upper_bound", "status", "rank", "float_rank", "gap",
            "generic_dimension", "excess")
PART_KEYS = ("name", "kind", "n_params", "rank", "generic_rank", "excess", "causes")

Analyse = Callable[[Path], dict]
# progress(event, step, done, total): event 'start' (done = rows already stored), 'step' (about
# to analyse `step`), 'done' (its row stored), 'skip' (stored before)
TrackProgress = Callable[[str, int | None, int, int], None]


@dataclass
class TrackResult:
    """The rows of a trajectory (one per step, by step) and where they are stored."""

    run_dir: str
    store: str
    options: dict
    rows: list[dict]
    computed: list[int] = field(default_factory=list)    # steps analysed by this call
    reused: list[int] = field(default_factory=list)      # steps read back from the store
    not_in_run: list[int] = field(default_factory=list)  # stored steps RUN_DIR no longer has
    seconds: float = 0.0

    @property
    def is_settled(self) -> bool:
        """Every row's rank settled (gap rule) or certified."""
        return all(r.get("status") in SETTLED_STATUSES for r in self.rows)

    def to_dict(self) -> dict:
        return {"run_dir": self.run_dir, "store": self.store, "options": self.options,
                "computed": self.computed, "reused": self.reused, "not_in_run": self.not_in_run,
                "seconds": self.seconds, "rows": self.rows}


def _seconds(value) -> float | None:
    """An analysis' seconds: a number, or a dict of phases with a 'total' (or summed)."""
    if isinstance(value, dict):
        return float(value["total"]) if "total" in value else float(sum(value.values()))
    return None if value is None else float(value)


def row_of(step: int, checkpoint: str, analysis: dict) -> dict:
    """One row of the trajectory from one checkpoint's analysis (its `to_dict`), values copied;
    `rank` is kept only when the status is settled or certified (else None: the float64 rank
    is `float_rank`, the bracket lower_bound..upper_bound)."""
    row = {"step": step, "checkpoint": checkpoint}
    row.update({k: analysis.get(k) for k in ROW_KEYS})
    if row["status"] not in SETTLED_STATUSES:
        row["rank"] = None   # a rank is read only where settled or certified (float_rank stays)
    row["profile"] = [{"tolerance": p["tolerance"],
                       "effective_dimension": p["effective_dimension"]}
                      for p in analysis.get("profile") or []]
    row["parts"] = [{k: p.get(k) for k in PART_KEYS} for p in analysis.get("parts") or []]
    # the batch functional dimension on --inputs, as the analysis gives it (None without inputs)
    row["batch"] = analysis.get("batch")
    if isinstance(row["batch"], dict) and row["batch"].get("status") not in SETTLED_STATUSES:
        row["batch"] = dict(row["batch"], rank=None)       # the same rule on the user's inputs
    row["notes"] = list(analysis.get("notes") or [])
    row["seconds"] = _seconds(analysis.get("seconds"))
    return _finite(row)


def _finite(value):
    """`value` with every non-finite float as None (an infinite gap: no gap to read), so that the
    row is the same in the store, the CSV and strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def read_token_ids(path: str | os.PathLike, tokens: int):
    """Token ids of shape (N, tokens) from a .npy (no pickles) or .pt (weights_only) file, as a
    LongTensor; the range [0, vocab) is checked by the analysis, which knows the vocabulary."""
    import numpy as np  # noqa: PLC0415
    import torch  # noqa: PLC0415

    path = Path(path)
    fix = "Save an integer array of shape (N, t) with numpy.save or torch.save."
    if not path.is_file():
        raise bad_value("inputs", "an existing .npy or .pt file of token ids", str(path), fix)
    if path.suffix not in (".npy", ".pt"):
        raise bad_value("inputs", "a .npy or .pt file", str(path), fix)
    try:
        if path.suffix == ".npy":
            data = torch.from_numpy(np.load(path, allow_pickle=False))
        else:
            data = torch.load(path, weights_only=True, map_location="cpu")
    except (ValueError, OSError, RuntimeError, EOFError, TypeError, pickle.UnpicklingError) as exc:
        raise bad_value("inputs", "a readable .npy or .pt file of token ids",
                        f"{path} ({type(exc).__name__})", fix) from None
    integer = isinstance(data, torch.Tensor) and not (
        data.dtype.is_floating_point or data.dtype.is_complex or data.dtype == torch.bool)
    if not integer or data.ndim != 2 or data.shape[1] != tokens or not len(data):
        what = (type(data).__name__ if not isinstance(data, torch.Tensor)
                else f"{data.dtype} of shape {tuple(data.shape)}")
        raise bad_value("inputs", f"integer token ids of shape (N, {tokens})", f"{path} ({what})",
                        fix)
    return data.long()


def file_digest(path: str | os.PathLike) -> str:
    """sha256 of a file's bytes: what the store records of --inputs."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def checkpoint_analyser(tokens: int, *, output: str = "logits", inputs=None, method: str = "auto",
                        seed: int = 0, progress: Callable[[str], None] | None = None) -> Analyse:
    """The default analysis: `models.checkpoint.checkpoint_rank(path, tokens, ...)`'s dict."""
    def analyse(path: Path) -> dict:
        from ..models.checkpoint import checkpoint_rank  # noqa: PLC0415

        return checkpoint_rank(path, tokens, output=output, inputs=inputs, method=method,
                               seed=seed, progress=progress).to_dict()
    return analyse


def track_options(tokens: int, output: str, method: str, seed: int,
                  inputs: str | os.PathLike | None) -> dict:
    """The options that make a trajectory, as its store records them (validated; the inputs
    file is read and checked, and recorded by the sha256 of its bytes)."""
    tokens = check_int("tokens", tokens, minimum=1, fix="Pass e.g. --tokens 3.")
    if inputs is not None:
        read_token_ids(inputs, tokens)
    return {"tokens": tokens,
            "output": check_choice("output", output, OUTPUTS),
            "method": check_choice("method", method, TRACK_METHODS),
            "seed": check_seed(seed),
            "inputs": None if inputs is None else file_digest(inputs)}


def plan_track(run_dir: str | os.PathLike, options: dict, store: Path) -> list[tuple[int, Path]]:
    """Everything `track` checks before any work: the listing, the folders' weights, the store
    and its options. Returns the (step, path) pairs."""
    checkpoints = list_checkpoints(run_dir)
    for step, path in checkpoints:
        check_has_weights(step, path)
    check_track_store(store)
    check_same_options(store, options)
    check_same_run(store, checkpoints)
    return checkpoints


def track(run_dir: str | os.PathLike, tokens: int, *, output: str = "logits",
          inputs: str | os.PathLike | None = None, method: str = "auto", seed: int = 0,
          store: str | os.PathLike | None = None, analyse: Analyse | None = None,
          progress: TrackProgress | None = None,
          analysis_progress: Callable[[str], None] | None = None) -> TrackResult:
    """Analyse every checkpoint of a training run, one row per step, resuming from `store`.

    `store` defaults to RUN_DIR/.neuromanifold-track.sqlite. A step already in the store is not
    analysed again (its stored row is returned); a store made with other options (tokens,
    output, method, seed, the inputs' sha256) or whose row of a step came from another entry
    name is refused before any work. `analyse(path) -> dict` replaces the default analysis
    (`checkpoint_analyser`); its dict has the keys of `row_of`. A KeyboardInterrupt stops the
    run with every finished row kept in the store.
    """
    t0 = time.perf_counter()
    options = track_options(tokens, output, method, seed, inputs)
    run = Path(run_dir)
    store = Path(store) if store is not None else default_store(run, None)
    checkpoints = plan_track(run, options, store)
    if analyse is None:
        ids = None if inputs is None else read_token_ids(inputs, options["tokens"])
        analyse = checkpoint_analyser(options["tokens"], output=options["output"], inputs=ids,
                                      method=options["method"], seed=options["seed"],
                                      progress=analysis_progress)
    conn = open_track_store(store, options)
    try:
        done = stored_rows(conn)
        steps = {step for step, _ in checkpoints}
        result = TrackResult(str(run), str(store), options, [],
                             not_in_run=sorted(set(done) - steps))
        total = len(checkpoints)
        n_done = sum(step in done for step in steps)
        if progress:
            progress("start", None, n_done, total)
        for step, path in checkpoints:
            if step in done:
                result.rows.append(done[step][1])
                result.reused.append(step)
                if progress:
                    progress("skip", step, n_done, total)
                continue
            if progress:
                progress("step", step, n_done, total)
            # through JSON, as the store keeps it: a computed row equals its stored copy
            row = json.loads(json.dumps(row_of(step, path.name, analyse(path))))
            insert_row(conn, step, path.name, row)
            result.rows.append(row)
            result.computed.append(step)
            n_done += 1
            if progress:
                progress("done", step, n_done, total)
    finally:
        conn.close()
    result.seconds = time.perf_counter() - t0
    return result


# ---------------------------------------------------------------- flat rows (CSV, the table)

def tolerance_label(tolerance: float) -> str:
    """'eff@1e-08': the column of the effective dimension at one relative tolerance."""
    return f"eff@{tolerance:.0e}"


def flat_rows(rows: list[dict]) -> list[dict]:
    """The rows with the profile and the parts' excess as columns (the CSV file and the table):
    eff@<tol> for each tolerance, excess:<part> for each part, batch:<key> for each number of
    the batch analysis (batch:eff@<tol> for its profile); a [lo, hi] excess as 'lo..hi'. The
    parts' causes and the notes are in the JSON rows only."""
    def cell(value):
        if isinstance(value, (list, tuple)):
            return "..".join(str(v) for v in value)
        return value

    tolerances = sorted({p["tolerance"] for r in rows for p in r["profile"]}, reverse=True)
    parts = list(dict.fromkeys(p["name"] for r in rows for p in r["parts"]))
    out = []
    for r in rows:
        flat = {k: cell(r[k]) for k in ("step", "checkpoint", *ROW_KEYS)}
        profile = {p["tolerance"]: p["effective_dimension"] for p in r["profile"]}
        flat.update({tolerance_label(t): profile.get(t) for t in tolerances})
        excess = {p["name"]: p["excess"] for p in r["parts"]}
        flat.update({f"excess:{name}": cell(excess.get(name)) for name in parts})
        flat.update({f"batch:{k}": v for k, v in _batch_cells(r.get("batch")).items()})
        flat["seconds"] = r["seconds"]
        out.append(flat)
    columns = list(dict.fromkeys(k for f in out for k in f))   # a batch key of some rows only
    return [{k: f.get(k) for k in columns} for f in out]


def _batch_cells(batch) -> dict:
    """The scalar entries of a batch analysis, and its profile as eff@<tol>."""
    if not isinstance(batch, dict):
        return {}
    cells = {k: v for k, v in batch.items()
             if v is None or isinstance(v, (bool, int, float, str))}
    cells.update({tolerance_label(p["tolerance"]): p["effective_dimension"]
                  for p in batch.get("profile") or []})
    return cells
