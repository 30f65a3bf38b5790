"""Figures. The only module that imports matplotlib (non-interactive Agg backend)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def plot_figure3(rows: list[dict], path: Path, attention: str) -> Path:
    """Estimated vs expected dimension against delta, as in the paper's Figure 3."""
    deltas = [r["delta"] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4.2), dpi=130)
    ax.plot(deltas, [r["expected"] for r in rows], "-", color="tab:blue", lw=2,
            label=f"expected ({rows[0]['formula']})")
    ax.plot(deltas, [r["n_params"] for r in rows], ":", color="tab:gray", label="parameters")
    settled = [r for r in rows if r["status"] in ("settled", "certified")]
    unsettled = [r for r in rows if r["status"] not in ("settled", "certified")]
    ax.plot([r["delta"] for r in settled], [r["estimated"] for r in settled], "o",
            color="tab:orange", ms=6, label=f"estimated ({rows[0]['method']}, float64)")
    if unsettled:
        ax.plot([r["delta"] for r in unsettled], [r["estimated"] for r in unsettled], "x",
                color="tab:red", ms=8, label="ambiguous rank")
    ax.set_xlabel(r"$\delta$  (widths $d_0=d_1=d_2=\delta$, $a_i=2$, $t=3$)")
    ax.set_ylabel("dimension")
    ax.set_title(f"Figure 3 ({attention} attention, l = 2)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_figure1(data, path: Path) -> Path:
    """The paper's Figure 1: a 3-D affine slice of M (d = 2, d' = 1, a = 2), singular curve highlighted.

    The surface is drawn as a dense cloud of points of the real zero set of the sliced defining
    polynomial, shaded by height; the singular curve (rank A <= 1, Theorem 3.4) in red.
    """
    from mpl_toolkits.mplot3d import Axes3D  # noqa: F401, PLC0415  (registers the 3d projection)

    pts, curve = data.surface_points, data.singular_points
    fig = plt.figure(figsize=(7, 6.5), dpi=140)
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
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
