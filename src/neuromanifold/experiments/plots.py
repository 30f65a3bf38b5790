"""Figures. The only module that imports matplotlib.

Every `plot_*` function returns its `matplotlib.figure.Figure` (shown inline when it is the last
expression of a notebook cell) and writes it to `path` as well when a path is given. Figures are
built without pyplot, so importing this module changes no backend and opens no window.
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure

from ..dimension.result import SETTLED_STATUSES


def plot_figure3(rows: list[dict], path: Path | None = None, attention: str = "softmax") -> Figure:
    """Estimated vs expected dimension against delta, as in the paper's Figure 3."""
    deltas = [r["delta"] for r in rows]
    fig = Figure(figsize=(6, 4.2), dpi=130)
    ax = fig.subplots()
    ax.plot(deltas, [r["expected"] for r in rows], "-", color="tab:blue", lw=2,
            label=f"expected ({rows[0]['formula']})")
    ax.plot(deltas, [r["n_params"] for r in rows], ":", color="tab:gray", label="parameters")
    settled = [r for r in rows if r["status"] in SETTLED_STATUSES]
    unsettled = [r for r in rows if r["status"] not in SETTLED_STATUSES]
    ax.plot([r["delta"] for r in settled], [r["estimated"] for r in settled], "o",
            color="tab:orange", ms=6, label=f"estimated ({rows[0]['method']}"
            + (", float64)" if rows[0]["method"] == "numerical" else ", proved)"))
    if unsettled:
        ax.plot([r["delta"] for r in unsettled], [r["estimated"] for r in unsettled], "x",
                color="tab:red", ms=8, label="ambiguous rank")
    ax.set_xlabel(r"$\delta$  (widths $d_0=d_1=d_2=\delta$, $a_i=2$, $t=3$)")
    ax.set_ylabel("dimension")
    ax.set_title(f"Figure 3 ({attention} attention, l = 2)")
    ax.grid(alpha=0.3)
    ax.legend()
    return _save(fig, path)


def plot_figure1(data, path: Path | None = None) -> Figure:
    """The paper's Figure 1: a 3-D affine slice of M (d = 2, d' = 1, a = 2), singular curve highlighted.

    The surface is drawn as a dense cloud of points of the real zero set of the sliced defining
    polynomial, shaded by height; the singular curve (rank A <= 1, Theorem 3.4) in red.
    """
    from mpl_toolkits.mplot3d import Axes3D  # noqa: F401, PLC0415  (registers the 3d projection)

    pts, curve = data.surface_points, data.singular_points
    fig = Figure(figsize=(7, 6.5), dpi=140)
    ax = fig.add_subplot(projection="3d")
    if len(pts):
        ax.scatter(pts[:, 0], pts[:, 1], pts[:, 2], c=pts[:, 2], cmap="viridis", s=1.2, alpha=0.55,
                   linewidths=0, depthshade=True)
    if len(curve):
        ax.scatter(curve[:, 0], curve[:, 1], curve[:, 2], color="red", s=3, alpha=1.0,
                   label="singular locus (rank A <= 1)", depthshade=False)
        ax.legend(loc="upper left")
    lim = data.extent
    ax.set_xlim(-lim, lim)
    ax.set_ylim(-lim, lim)
    ax.set_zlim(-lim, lim)
    ax.set_xlabel("$s_1$")
    ax.set_ylabel("$s_2$")
    ax.set_zlabel("$s_3$")
    ax.set_title("Figure 1: slice of the neuromanifold, d = 2, d' = 1, a = 2\n"
                 f"(degree-{data.degree} hypersurface of its 6-dim span; seed {data.seed})", fontsize=10)
    ax.view_init(elev=22, azim=-60)
    return _save(fig, path)


def plot_measured_vs_general(rows: list[dict], path: Path | None = None) -> Figure:
    """Measured (settled or certified) lightning dimensions against the `general` closed form (a
    conjecture): where it holds (on the diagonal) and where it fails (red)."""
    fig = Figure(figsize=(6.2, 5), dpi=130)
    ax = fig.subplots()
    done = [r for r in rows if r["status"] in SETTLED_STATUSES and r.get("general") is not None]
    for agree, colour, label in ((True, "tab:green", "general = measured"),
                                 (False, "tab:red", "general != measured")):
        pts = [r for r in done if (r["general_difference"] == 0) == agree]
        if pts:
            ax.scatter([r["general"] for r in pts], [r["dimension"] for r in pts], s=18,
                       color=colour, alpha=0.7, label=f"{label} ({len(pts)})")
    if done:
        lo = min(min(r["general"], r["dimension"]) for r in done)
        hi = max(max(r["general"], r["dimension"]) for r in done)
        ax.plot([lo, hi], [lo, hi], "-", color="tab:gray", lw=1)
    ax.set_xlabel("general closed form (conjecture)")
    ax.set_ylabel("measured dimension (settled or certified)")
    ax.set_title(f"Where the general closed form holds: lightning, {len(done)} results"
                 + ("" if done else "\n(no settled or certified lightning result in this store)"),
                 fontsize=10)
    ax.grid(alpha=0.3)
    if done:
        ax.legend(fontsize=7)
    return _save(fig, path)


def plot_measured_vs_formula(rows: list[dict], path: Path | None = None) -> Figure:
    """Measured dimension against the paper's closed form, coloured by whether its hypotheses hold."""
    fig = Figure(figsize=(6.2, 5), dpi=130)
    ax = fig.subplots()
    done = [r for r in rows if r["status"] in SETTLED_STATUSES and r.get("difference", 0) is not None]
    markers = {"lightning": "o", "softmax": "s"}
    for attention in sorted({r["attention"] for r in done}):
        for holds, colour, label in ((False, "tab:red", "hypotheses fail"),
                                     (True, "tab:green", "hypotheses hold")):
            pts = [r for r in done if r["attention"] == attention and r["hypotheses_hold"] == holds]
            if pts:
                ax.scatter([r["formula"] for r in pts], [r["dimension"] for r in pts], s=18,
                           marker=markers.get(attention, "o"), facecolors="none" if not holds else colour,
                           edgecolors=colour, alpha=0.7, label=f"{attention}: {label} ({len(pts)})")
    if done:
        lo = min(min(r["formula"], r["dimension"]) for r in done)
        hi = max(max(r["formula"], r["dimension"]) for r in done)
        ax.plot([lo, hi], [lo, hi], "-", color="tab:gray", lw=1, label="measured = formula")
    methods = ", ".join(sorted({r["method_used"] or r["method"] for r in done}))
    ax.set_xlabel("closed form (Eq. 7 / 14 lightning, Eq. 16 softmax)")
    ax.set_ylabel(f"measured dimension ({methods})")
    ax.set_title(f"Measured vs formula: {len(done)} settled or certified results"
                 + (f"\n(not shown: {_not_shown(rows)})" if len(done) < len(rows) else ""),
                 fontsize=10)
    ax.grid(alpha=0.3)
    if done:
        ax.legend(fontsize=7)
    return _save(fig, path)


def _not_shown(rows: list[dict]) -> str:
    """'54 certified without a closed form, 7 lower-bound': the rows a measured-vs-formula plot
    leaves out, counted by why (no closed form to compare with, or no measured dimension)."""
    from collections import Counter  # noqa: PLC0415

    no_form = Counter(r["status"] for r in rows
                      if r["status"] in SETTLED_STATUSES and r.get("difference", 0) is None)
    unmeasured = Counter(r["status"] for r in rows if r["status"] not in SETTLED_STATUSES)
    parts = [f"{n} {status} without a closed form" for status, n in sorted(no_form.items())]
    parts += [f"{n} {status}" for status, n in sorted(unmeasured.items())]
    return ", ".join(parts)


def plot_difference_heatmap(cells: dict, path: Path | None = None, x: str = "d1", y: str = "d0",
                            subtitle: str = "", *, empty: str | None = None) -> Figure:
    """Mean (measured - formula) over two grid axes, one panel per attention kind.

    Solid black frame: the formula's hypotheses hold for every item of the cell; dashed: for some.
    """
    from matplotlib.patches import Rectangle  # noqa: PLC0415

    kinds = list(cells) or ["(no results)"]
    fig = Figure(figsize=(5.2 * len(kinds), 4.6), dpi=130)
    axes = fig.subplots(1, len(kinds), squeeze=False)
    limit = max([abs(v) for c in cells.values() for v in c["mean"].values()] + [1.0])
    image = None
    for ax, kind in zip(axes[0], kinds):
        if kind not in cells:
            ax.set_axis_off()
            import textwrap  # noqa: PLC0415

            ax.text(0.5, 0.5, textwrap.fill(empty or "no results with these axes", 60),
                    ha="center", va="center", fontsize=9, transform=ax.transAxes)
            continue
        c = cells[kind]
        xs, ys = c["xs"], c["ys"]
        grid = [[c["mean"].get((xv, yv), float("nan")) for xv in xs] for yv in ys]
        image = ax.imshow(grid, origin="lower", cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto")
        for j, yv in enumerate(ys):
            for i, xv in enumerate(xs):
                if (xv, yv) not in c["mean"]:
                    continue
                value = c["mean"][(xv, yv)]
                ax.text(i, j, f"{value:.3g}", ha="center", va="center", fontsize=7,
                        color="white" if abs(value) > 0.6 * limit else "black")
                hold = c["hold"][(xv, yv)]
                if hold != "none":
                    ax.add_patch(Rectangle((i - 0.46, j - 0.46), 0.92, 0.92, fill=False, lw=1.6,
                                           edgecolor="black", ls="-" if hold == "all" else "--"))
        ax.set_xticks(range(len(xs)), [str(v) for v in xs])
        ax.set_yticks(range(len(ys)), [str(v) for v in ys])
        ax.set_xlabel(x)
        ax.set_ylabel(y)
        ax.set_title(f"{kind}: mean(measured - formula)\n{subtitle}", fontsize=9)
    if image is not None:
        fig.colorbar(image, ax=axes[0].tolist(), shrink=0.85,
                     label="measured - formula (frame: hypotheses hold; dashed: some)")
    return _save(fig, path, tight=False)


def plot_feature_deficit(deficits: dict, path: Path | None = None) -> Figure:
    """Dimension deficit n_params - dimension of each decoder feature (`sweeps.report.
    feature_deficits`): one line of markers per base network, the features along x ('none' first);
    filled markers are settled or certified, hollow ones lower-bound rows (the deficit is at most
    the value shown)."""
    features = sorted({f for by in deficits.values() for f in by}, key=lambda f: (f != "none", f))
    fig = Figure(figsize=(max(6.2, 0.55 * len(features) + 3), 5), dpi=130)
    ax = fig.subplots()
    x = {f: k for k, f in enumerate(features)}
    n_bases = max(len(deficits), 1)
    for n, (base, by) in enumerate(sorted(deficits.items())):
        colour = f"C{n % 10}"
        shift = 0.5 * (n + 0.5) / n_bases - 0.25   # side by side within a feature's slot
        shown = [f for f in features if f in by]
        for f in shown:
            value, status = by[f]
            settled = status in SETTLED_STATUSES
            ax.scatter([x[f] + shift], [value], s=24, color=colour,
                       facecolors=colour if settled else "none",
                       label=base if f == shown[0] else None)
    ax.set_xticks(range(len(features)))
    ax.set_xticklabels(features, rotation=40, ha="right", fontsize=7)
    ax.set_ylabel("deficit n_params - dimension")
    ax.set_title("What each decoder feature does to the dimension deficit\n(filled: settled or "
                 "certified; hollow: lower-bound rows, deficit at most the value)"
                 + ("" if deficits else "\n(no result with a dimension in this store)"),
                 fontsize=9)
    ax.grid(alpha=0.3)
    if deficits:
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _save(fig, path)


def plot_heads(rows: list[dict], path: Path | None = None, title: str = "") -> Figure:
    """Dimension against heads: lightning and softmax, with the naive count and ambient bound."""
    heads = [r["heads"] for r in rows]
    fig = Figure(figsize=(6, 4.2), dpi=130)
    ax = fig.subplots()
    ax.plot(heads, [r["n_params"] for r in rows], ":", color="tab:gray", label="parameters (naive count)")
    if rows[0]["ambient"] is not None:
        ax.axhline(rows[0]["ambient"], ls="--", color="tab:green", label="ambient bound (lightning)")
    for key, colour, label in (("lightning", "tab:blue", "lightning (exact F_p)"),
                               ("softmax", "tab:orange", "softmax (numerical)")):
        ax.plot(heads, [r[key] for r in rows], "-o", color=colour, label=label)
        loose = [r for r in rows if r[f"{key}_status"] not in SETTLED_STATUSES]
        if loose:
            ax.plot([r["heads"] for r in loose], [r[key] for r in loose], "x", color="tab:red", ms=9,
                    label=f"{key}: not settled (lower bound / ambiguous)")
    ax.set(xlabel="heads H", ylabel="dimension", xticks=heads, title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def _span(value) -> tuple[float, float] | None:
    """An excess as (lo, hi): a number is both; a [lo, hi] pair (an open bracket) its ends."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return float(value[0]), float(value[1])
    return float(value), float(value)


def plot_track(rows: list[dict], path: Path | None = None, title: str = "") -> Figure:
    """A training run's local geometry against the step (`experiments.track`), two panels.

    Top: the bracket lower_bound <= rank at the point <= upper_bound (shaded; the lower bound
    certified where the size allowed, the upper bound exact over F_p), the rank where settled or
    certified (filled) and the float64 rank where not (hollow), the effective dimensions at each
    relative tolerance (dashed), the generic dimension, and the batch rank on the user's inputs
    where the rows have one. Bottom: the excess degeneracy
    (generic dimension minus the rank at the point) and
    each part's excess, parts of kind 'layer' when the analysis has them, else every part whose
    excess is non-zero at some step. An excess that is an open bracket [lo, hi] is drawn as a
    vertical bar from lo to hi, never as one value.
    """
    steps = [r["step"] for r in rows]
    fig = Figure(figsize=(9.5, 7), dpi=130)
    top, bottom = fig.subplots(2, 1, sharex=True)

    def series(key):
        pts = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
        return [p[0] for p in pts], [p[1] for p in pts]

    lo_x, lo = series("lower_bound")
    up_x, up = series("upper_bound")
    if lo and len(lo_x) == len(up_x) == len(rows):
        top.fill_between(steps, lo, up, color="tab:blue", alpha=0.15, step=None,
                         label="bracket (lower: certified, upper: exact F_p)")
    if up:
        top.plot(up_x, up, "-", color="tab:blue", lw=1.2, label="upper bound at the point")
    if lo:
        top.plot(lo_x, lo, "-", color="tab:cyan", lw=1.2, label="lower bound (certified)")
    settled = [r for r in rows if r.get("status") in SETTLED_STATUSES and r.get("rank") is not None]
    loose = [r for r in rows if r not in settled and r.get("float_rank") is not None]
    if settled:
        top.plot([r["step"] for r in settled], [r["rank"] for r in settled], "o",
                 color="tab:blue", ms=5, label="rank (settled or certified)")
    if loose:
        top.plot([r["step"] for r in loose], [r["float_rank"] for r in loose], "o", ms=6,
                 markerfacecolor="none", color="tab:red", label="float64 rank (not settled)")
    tolerances = sorted({p["tolerance"] for r in rows for p in r.get("profile") or []},
                        reverse=True)
    for n, tol in enumerate(tolerances):
        pts = [(r["step"], p["effective_dimension"]) for r in rows for p in r.get("profile") or []
               if p["tolerance"] == tol]
        top.plot([p[0] for p in pts], [p[1] for p in pts], "--", color=f"C{(n + 2) % 10}", lw=1,
                 label=f"effective dimension, sigma > {tol:.0e} sigma_1")
    batch = [(r["step"], r["batch"]) for r in rows if isinstance(r.get("batch"), dict)]
    batch = [(s, b.get("rank") if b.get("rank") is not None else b.get("float_rank"),
              b.get("rank") is not None) for s, b in batch]
    batch = [b for b in batch if b[1] is not None]
    if batch:
        top.plot([b[0] for b in batch], [b[1] for b in batch], "-.", color="tab:purple", lw=1,
                 label="on your inputs (--inputs): rank, or float64 rank where hollow")
        loose_b = [b for b in batch if not b[2]]
        if loose_b:
            top.plot([b[0] for b in loose_b], [b[1] for b in loose_b], "s", ms=5,
                     markerfacecolor="none", color="tab:purple")
    gx, gy = series("generic_dimension")
    if gy:
        top.plot(gx, gy, ":", color="tab:gray", lw=1.5, label="generic dimension")
    top.set_ylabel("dimension")
    top.set_title(title or "Local geometry along the training run", fontsize=10)
    top.grid(alpha=0.3)
    top.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))

    spans = [(r["step"], _span(r.get("excess"))) for r in rows]
    spans = [(s, e) for s, e in spans if e is not None]
    exact = [(s, e[0]) for s, e in spans if e[0] == e[1]]
    open_ = [(s, e) for s, e in spans if e[0] != e[1]]
    if exact:
        bottom.plot([s for s, _ in exact], [v for _, v in exact], "-o", color="black", ms=3,
                    lw=1.5, label="excess of the point")
    if open_:
        bottom.vlines([s for s, _ in open_], [e[0] for _, e in open_], [e[1] for _, e in open_],
                      color="tab:red", lw=3, alpha=0.5, label="excess: open bracket lo..hi")
    parts = [p for r in rows for p in r.get("parts") or []]
    layer_names = [p["name"] for p in parts if p.get("kind") == "layer"]
    names = list(dict.fromkeys(layer_names or [
        p["name"] for p in parts if _span(p.get("excess")) not in (None, (0.0, 0.0))]))
    for n, name in enumerate(names):
        pts = [(r["step"], _span(p.get("excess"))) for r in rows for p in r.get("parts") or []
               if p["name"] == name and _span(p.get("excess")) is not None]
        bottom.plot([s for s, e in pts if e[0] == e[1]], [e[0] for _, e in pts if e[0] == e[1]],
                    "-", marker=".", color=f"C{n % 10}", lw=1, label=f"{name}")
        wide = [(s, e) for s, e in pts if e[0] != e[1]]
        if wide:
            bottom.vlines([s for s, _ in wide], [e[0] for _, e in wide], [e[1] for _, e in wide],
                          color=f"C{n % 10}", lw=1, alpha=0.6)
    bottom.set_xlabel("training step")
    bottom.set_ylabel("excess (generic - rank)")
    bottom.grid(alpha=0.3)
    if spans or names:
        bottom.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    else:
        bottom.text(0.5, 0.5, "no excess in these rows (the analysis gave none)", ha="center",
                    va="center", fontsize=9, transform=bottom.transAxes)
    return _save(fig, path)


def _save(fig: Figure, path: Path | None, *, tight: bool = True) -> Figure:
    """Lay out `fig`, write it to `path` (unless None) and return it."""
    if tight:
        fig.tight_layout()
    if path is not None:
        fig.savefig(path, **({} if tight else {"bbox_inches": "tight"}))
    return fig
