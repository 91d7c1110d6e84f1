"""Shared by the figure and table scripts: one plotting style, and outputs that record the hashes of
the inputs they were made from (PDF/PNG metadata and a `<name>.inputs.json` sidecar)."""
from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from opd import provenance, store  # noqa: E402
from opd.rows import Row  # noqa: E402

COLUMN_WIDTH = 3.4  # inches: one column of a two-column paper
PASS_COLOR, FAIL_COLOR, NEUTRAL = "#1b7837", "#c51b7d", "#4d4d4d"
SERIES_COLORS = ("#2166ac", "#b2182b", "#1b7837", "#762a83", "#e08214", "#4d4d4d")  # lines without a family
FAMILY_COLORS = {"baseline": "#000000", "weights": "#2166ac", "kv_cache": "#b2182b", "staleness": "#5aae61",
                 "noise": "#e08214", "combined": "#762a83", "rl": "#878787"}
STYLE = {"font.size": 7, "axes.titlesize": 7.5, "axes.labelsize": 7, "legend.fontsize": 6, "xtick.labelsize": 6,
         "ytick.labelsize": 6, "lines.linewidth": 1.0, "lines.markersize": 3.5, "axes.spines.top": False,
         "axes.spines.right": False, "figure.dpi": 200, "savefig.bbox": "tight", "savefig.pad_inches": 0.02,
         "pdf.fonttype": 42}


def figure(width: float = COLUMN_WIDTH, height: float = 2.3, ncols: int = 1, nrows: int = 1, **kw):
    plt.rcParams.update(STYLE)
    return plt.subplots(nrows, ncols, figsize=(width, height), constrained_layout=True, **kw)


def delta_axis(ax, values_pct) -> None:
    """A y-axis for Delta in percent: linear within +-100% (so tau and the 0-50% range are readable, with
    ticks there), logarithmic beyond for the large failures."""
    ax.set_yscale("symlog", linthresh=100, linscale=2.0)
    v = np.asarray(values_pct, dtype=float)
    top = max(100.0, float(np.nanmax(v)) if np.isfinite(v).any() else 100.0)
    bottom = min(-20.0, float(np.nanmin(v)) if np.isfinite(v).any() else -20.0)
    ticks = [t for t in (-100, -50, -20, 0, 20, 50, 100, 300, 1000, 3000, 10000) if 1.5 * bottom <= t <= 1.5 * top]
    ax.set_yticks(ticks, [f"{t:+d}" if t else "0" for t in ticks])
    ax.minorticks_off()


def input_hashes(inputs) -> dict[str, str]:
    return {str(p): provenance.sha256_file(p) for p in inputs}


def input_sidecar(path, inputs) -> None:
    """`<name>.inputs.json` beside an output: the sha256 of every input it was made from."""
    path = Path(path)
    store.write_json({"output": path.name, "inputs": input_hashes(inputs)}, path.with_suffix(".inputs.json"))


def save_figure(fig, pdf, png, inputs) -> None:
    """PDF and PNG written atomically, both carrying the sha256 of every input."""
    hashes = input_hashes(inputs)
    subject = json.dumps(hashes, sort_keys=True)
    for path, meta in ((Path(pdf), {"Subject": subject, "Creator": "opd-budget", "CreationDate": None}),
                       (Path(png), {"Description": subject, "Software": "opd-budget"})):
        store.atomic_write(path, lambda tmp, p=path, m=meta: fig.savefig(tmp, format=p.suffix[1:], metadata=m))
    input_sidecar(Path(png), inputs)
    plt.close(fig)


def rows_frame(path) -> pd.DataFrame:
    """The analysis's rows.parquet with what opd.rows.Row says of each row: its family (mismatch source),
    whether the budget is measured on it, and its engine (numerics and staleness)."""
    rows = store.read_table(path)
    R = [Row.of(r) for r in rows.to_dict("records")]
    return rows.assign(family=[r.family for r in R], in_budget=[r.in_budget for r in R],
                       engine_key=[r.engine_key for r in R])


def _fmt(v, digits: int):
    if isinstance(v, (float, np.floating)):
        if np.isnan(v):
            return "–"
        return f"{v:.{digits}g}" if abs(v) < 1e-3 and v != 0 else f"{v:.{digits}f}"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    return str(v)


def save_table(df: pd.DataFrame, md, tex, inputs, caption: str, digits: int = 4, notes: str = "") -> None:
    """Markdown (with a caption line and notes) and a LaTeX tabular, both atomically."""
    cells = df.map(lambda v: _fmt(v, digits)) if len(df) else df
    md_text = f"**{caption}**\n\n" + (cells.to_markdown(index=False) if len(df) else "(no rows)") + "\n"
    if notes:
        md_text += f"\n{notes}\n"
    esc = lambda s: str(s).replace("_", r"\_").replace("%", r"\%").replace("&", r"\&").replace("#", r"\#")  # noqa: E731
    lines = [r"\begin{table}[t]", r"\centering", r"\small", rf"\caption{{{esc(caption)}}}",
             r"\begin{tabular}{" + "l" * len(df.columns) + "}", r"\toprule",
             " & ".join(esc(c) for c in df.columns) + r" \\", r"\midrule"]
    lines += [" & ".join(esc(v) for v in row) + r" \\" for row in cells.itertuples(index=False)]
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}", ""]
    store.atomic_write(Path(md), lambda tmp: Path(tmp).write_text(md_text))
    store.atomic_write(Path(tex), lambda tmp: Path(tmp).write_text("\n".join(lines)))
    input_sidecar(Path(md), inputs)
