"""Plots of the per-device memory (matplotlib, Agg backend): each a pure function of exact bytes the commands
computed, written deterministically (fixed SVG hash salt, no date) and atomically, as .png or .svg."""
from __future__ import annotations

import io
import os
from typing import Mapping, Optional, Sequence, Tuple

from symbolic.errors import ConfigError
from symbolic.files import check_out_file as check_writable  # the one output-file check
from symbolic.files import write_atomic
from symbolic.units import GiB

from .report.extras import installed

FORMATS = ("png", "svg")
COMPONENT_COLOURS = {"weights": "#4c72b0", "gradients": "#dd8452", "optimizer": "#55a868",
                     "activations": "#c44e52", "overheads": "#bbbbbb"}


#: The one line a --plot without matplotlib prints (exit 2).
MISSING = "--plot needs the plot extra (matplotlib is not installed): pip install 'memsym[plot]'"


def check_output(path: str) -> str:
    """The plot format of ``path`` ('png' or 'svg'), writable and with the plot extra installed (before any work)."""
    ext = os.path.splitext(os.fspath(path))[1].lower().lstrip(".")
    if ext not in FORMATS:
        raise ConfigError("plot-format", f"--plot needs a .png or .svg file name, got {path!r}")
    check_writable(path)
    if not installed("matplotlib"):
        raise ConfigError("extra", MISSING)
    return ext


def _pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError("extra", MISSING) from None
    matplotlib.rcParams.update({"svg.hashsalt": "memsym", "svg.fonttype": "path", "font.size": 9,
                                "path.simplify": False})
    return plt


def _axes(size):
    """A figure of ``size`` inches with one plot: (figure, axes)."""
    return _pyplot().subplots(figsize=size)


def _budget(line, budget) -> None:
    """The HBM budget as a dashed line (``line``: the axes' axhline or axvline), or nothing without one."""
    if budget is not None:
        line(float(budget) / GiB, color="black", linestyle="--", linewidth=1, label=f"HBM {float(budget) / GiB:g} GiB")


def save(fig, path: str) -> None:
    """Save ``fig`` deterministically (no date, fixed hash salt) and atomically (after :func:`check_output`: a
    writable .png or .svg), then close it."""
    fmt = check_output(path)
    buf = io.BytesIO()
    meta = {"Date": None} if fmt == "svg" else {"Software": None}
    fig.savefig(buf, format=fmt, metadata=meta, dpi=120 if fmt == "png" else None, bbox_inches="tight")
    import matplotlib.pyplot as plt  # imported by _pyplot, which made the figure
    plt.close(fig)
    write_atomic(path, buf.getvalue())


def memory_vs_seq(series: Mapping[str, Tuple[Sequence[int], Sequence[float]]], budget: Optional[float], path: str,
                  title: str = "", ylabel: str = "peak per device (GiB)", marks: Mapping[str, float] | None = None):
    """One line per policy {policy: (s, bytes)}; ``budget`` horizontal, ``marks`` {policy: s*} dotted."""
    fig, ax = _axes((6.4, 4.0))
    for name, (xs, ys) in series.items():
        line, = ax.plot(list(xs), [float(y) / GiB for y in ys], marker="o", markersize=3, label=name)
        if marks and marks.get(name):
            ax.axvline(float(marks[name]), color=line.get_color(), linestyle=":", linewidth=1)
    _budget(ax.axhline, budget)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sequence length s (tokens)")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", linewidth=0.3)
    ax.legend(title="recomputation", fontsize=8)
    save(fig, path)


def stacked_breakdown(rows: Sequence[Tuple[str, Mapping[str, float], Optional[float]]], budget: Optional[float],
                      path: str, title: str = ""):
    """Horizontal stacked bars: rows of (label, {component: bytes}, peak bytes or None)."""
    n = len(rows)
    fig, ax = _axes((7.5, 1.2 + 0.32 * max(n, 1)))
    ys = list(range(n))[::-1]
    used = set()
    for y, (label, parts, peak) in zip(ys, rows):
        left = 0.0
        for comp, val in parts.items():
            w = float(val) / GiB
            ax.barh(y, w, left=left, color=COMPONENT_COLOURS.get(comp), edgecolor="white", linewidth=0.5,
                    label=comp if comp not in used else None)
            used.add(comp)
            left += w
        if peak is not None and float(peak) / GiB > left:
            ax.barh(y, float(peak) / GiB - left, left=left, color=COMPONENT_COLOURS["overheads"], edgecolor="white",
                    linewidth=0.5, label="overheads (Sec. 6)" if "overheads" not in used else None)
            used.add("overheads")
    _budget(ax.axvline, budget)
    ax.set_yticks(ys)
    ax.set_yticklabels([r[0] for r in rows], fontsize=7)
    ax.set_xlabel("bytes per device (GiB)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.45 / max(n, 1) - 0.1), ncol=3)
    ax.grid(True, axis="x", linewidth=0.3)
    save(fig, path)


def tornado(items: Sequence[Tuple[str, float]], path: str, title: str = ""):
    """Horizontal bars of elasticities (label, value), largest |value| on top; zero line."""
    items = sorted(items, key=lambda kv: (-abs(kv[1]), kv[0]))
    n = len(items)
    fig, ax = _axes((6.4, 1.2 + 0.35 * max(n, 1)))
    ys = list(range(n))[::-1]
    vals = [float(v) for _, v in items]
    ax.barh(ys, vals, color=["#c44e52" if v > 0 else "#4c72b0" for v in vals])
    for y, v in zip(ys, vals):
        ax.annotate(f"{v:+.3f}", (v, y), xytext=(3 if v >= 0 else -3, 0), textcoords="offset points",
                    ha="left" if v >= 0 else "right", va="center", fontsize=7)
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_yticks(ys)
    ax.set_yticklabels([k for k, _ in items])
    ax.set_xlabel("elasticity (x/M) dM/dx of the per-device total")
    ax.set_title(title, fontsize=9)
    lim = max([abs(v) for v in vals] + [1e-9]) * 1.25
    ax.set_xlim(-lim, lim)
    ax.grid(True, axis="x", linewidth=0.3)
    save(fig, path)


KIND_MARKERS = {"max_allocated": "o", "reserved": "s", "nvidia_smi": "D", "oom": "x"}


def predicted_vs_measured(points: Sequence[Tuple[str, str, float, float]], path: str, title: str = "",
                          band: Tuple[float, float] = (0.9, 1.1)):
    """Predicted against measured bytes per run (log-log): points of (label, kind, measured, predicted);
    the diagonal and the ``band`` of ratios drawn; an OOM run's measured value is the capacity it exceeded."""
    fig, ax = _axes((6.4, 5.2))
    vals = [float(v) / GiB for _, _, m, p in points for v in (m, p)] or [1.0]
    lo, hi = min(vals) / 1.5, max(vals) * 1.5
    ax.plot([lo, hi], [lo, hi], color="black", linewidth=0.8, label="predicted = measured")
    ax.fill_between([lo, hi], [lo * band[0], hi * band[0]], [lo * band[1], hi * band[1]], color="#dddddd",
                    label=f"ratio {band[0]:g}-{band[1]:g}")
    used = set()
    for label, kind, measured, predicted in points:
        x, y = float(measured) / GiB, float(predicted) / GiB
        ax.scatter([x], [y], marker=KIND_MARKERS.get(kind, "o"), s=28, color="#c44e52" if kind == "oom" else "#4c72b0",
                   label=kind.replace("_", " ") if kind not in used else None, zorder=3)
        used.add(kind)
        ax.annotate(label, (x, y), xytext=(4, 2), textcoords="offset points", fontsize=6)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured per GPU (GiB; OOM: the capacity exceeded)")
    ax.set_ylabel("predicted per GPU (GiB)")
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", linewidth=0.3)
    ax.legend(fontsize=7, loc="upper left")
    save(fig, path)
