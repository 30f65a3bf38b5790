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
