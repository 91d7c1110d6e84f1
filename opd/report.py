"""Shared by the figure and table scripts: one plotting style, and outputs that record the hashes of
the inputs they were made from (PDF/PNG metadata and a `<name>.inputs.json` sidecar)."""
from __future__ import annotations

import html
import io
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from opd import provenance, store
from opd.rows import Row


COLUMN_WIDTH = 3.4  # inches: one column of a two-column paper
PASS_COLOR, FAIL_COLOR, NEUTRAL = "#1b7837", "#c51b7d", "#4d4d4d"
SERIES_COLORS = ("#2166ac", "#b2182b", "#1b7837", "#762a83", "#e08214", "#4d4d4d")  # lines without a family
# one colour per opd.rows.Row.family, in the order figures list them
FAMILY_COLORS = {"baseline": "#000000", "weights": "#2166ac", "activations": "#01665e", "kv_cache": "#b2182b",
                 "staleness": "#5aae61", "noise": "#e08214", "combined": "#762a83", "rl": "#878787"}
# The PNGs' resolution (the PDFs are vector): 150 dpi reads on a screen and is a third the bytes of 200 (the figures
# are committed, so their size is the repository's). Layout is computed at figure.dpi, so the PNG is the PDF's.
PNG_DPI = 150
STYLE = {"font.size": 7, "axes.titlesize": 7.5, "axes.labelsize": 7, "legend.fontsize": 6, "xtick.labelsize": 6,
         "ytick.labelsize": 6, "lines.linewidth": 1.0, "lines.markersize": 3.5, "axes.spines.top": False,
         "axes.spines.right": False, "figure.dpi": 200, "savefig.dpi": PNG_DPI, "savefig.bbox": "tight", "savefig.pad_inches": 0.02,
         "pdf.fonttype": 42}


def pyplot():
    """matplotlib's pyplot on the Agg backend, imported when first used: the table scripts import this module
    too and never plot (importing matplotlib is about a quarter of their start-up)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def figure(width: float = COLUMN_WIDTH, height: float = 2.3, ncols: int = 1, nrows: int = 1, **kw):
    plt = pyplot()
    plt.rcParams.update(STYLE)
    return plt.subplots(nrows, ncols, figsize=(width, height), constrained_layout=True, **kw)


def delta_axis(ax, values_pct) -> None:
    """A y-axis for Delta in percent: linear within +-100% (so tau and the 0-50% range are readable, with
    ticks there), logarithmic beyond for the large failures."""
    from opd import plotmath
    ax.set_yscale(plotmath.SYMLOG, linthresh=100, linscale=2.0)
    v = np.asarray(values_pct, dtype=float)
    top = max(100.0, float(np.nanmax(v)) if np.isfinite(v).any() else 100.0)
    bottom = min(-20.0, float(np.nanmin(v)) if np.isfinite(v).any() else -20.0)
    ticks = [t for t in (-100, -50, -20, 0, 20, 50, 100, 300, 1000, 3000, 10000) if 1.5 * bottom <= t <= 1.5 * top]
    ax.set_yticks(ticks, [f"{t:+d}" if t else "0" for t in ticks])
    ax.minorticks_off()


# ---------------------------------------------------------------- what every figure needs
# Three rules every figure script follows, written once here:
# 1. a panel that stands alone carries its own legend, of its own handles (`panel_legend`);
# 2. a value axis includes its reference, 0 or the baseline's value (`include_reference`), so that a
#    difference is drawn to scale;
# 3. labels never collide: line labels are spread apart (`label_lines`, `spread`), and become a legend
#    where they cannot all fit.

LEGEND = {"frameon": False, "fontsize": 5.5, "handlelength": 1.6, "borderaxespad": 0.3, "labelspacing": 0.3}


def panel_legend(ax, below: bool = False, **kw):
    """This panel's own legend (every panel that stands alone has one): inside the panel where matplotlib
    finds room, or under it (`below`, for a panel whose lines fill it)."""
    opts = {**LEGEND, **({"loc": "upper center", "bbox_to_anchor": (0.5, -0.22)} if below else {}), **kw}
    return ax.legend(**opts)


def include_reference(ax, ref: float = 0.0, axis: str = "y", margin: float = 0.04) -> None:
    """Widen the axis so that it includes `ref` (0, or the baseline's value; positive on a log axis), with
    `margin` (a fraction of the span) beyond it, so that a difference from the reference is drawn to scale."""
    get, set_ = (ax.get_ylim, ax.set_ylim) if axis == "y" else (ax.get_xlim, ax.set_xlim)
    lo, hi = get()
    if lo <= ref <= hi:
        return
    span = max(hi, ref) - min(lo, ref)
    set_(min(lo, ref - margin * span * (ref <= lo)), max(hi, ref + margin * span * (ref >= hi)))


def spread(y, gap: float, lo: float = -np.inf, hi: float = np.inf) -> np.ndarray:
    """Label positions as close as possible (least squares) to `y` with at least `gap` between neighbours
    and the order of `y` kept, inside [lo, hi] where they fit: isotonic regression of y_(i) - i * gap."""
    from scipy.optimize import isotonic_regression
    y = np.asarray(y, dtype=float)
    if y.size == 0:
        return y.copy()
    order = np.argsort(y, kind="stable")
    steps = gap * np.arange(y.size)
    q = isotonic_regression(y[order] - steps).x
    if hi - lo >= gap * (y.size - 1):
        q = np.clip(q, lo, hi - steps[-1])
    out = np.empty_like(y)
    out[order] = q + steps
    return out


def _freeze(ax) -> float:
    """Fix the axis limits and lay the figure out; returns the axes' height in points."""
    ax.set_xlim(ax.get_xlim())
    ax.set_ylim(ax.get_ylim())
    ax.figure.draw_without_rendering()
    return ax.get_window_extent().height * 72 / ax.figure.dpi


def _annotate_spread(ax, anchors, labels, colors, gap: float, pad_pt: float, fontsize: float) -> list:
    """Labels right of their anchors (data coordinates), moved apart vertically (`spread`, in axes fraction)
    with a thin leader where one moved."""
    import matplotlib.transforms as mtransforms
    y_frac = [ax.transAxes.inverted().transform(ax.transData.transform(a))[1] for a in anchors]
    placed = spread(y_frac, gap, gap / 2, 1 - gap / 2)
    where = mtransforms.offset_copy(mtransforms.blended_transform_factory(ax.transData, ax.transAxes),
                                    fig=ax.figure, x=pad_pt, y=0, units="points")
    return [ax.annotate(label, xy=a, xycoords="data", xytext=(a[0], yp), textcoords=where, fontsize=fontsize,
                        color=c, va="center", ha="left", annotation_clip=False,
                        arrowprops={"arrowstyle": "-", "lw": 0.3, "color": c, "shrinkA": 0, "shrinkB": 1.5}
                        if abs(yp - yf) > gap / 4 else None)
            for a, label, c, yf, yp in zip(anchors, labels, colors, y_frac, placed)]


def label_lines(ax, lines, labels, gap_pt: float = 6.5, pad_pt: float = 10.0):
    """Label each line at its right end, the labels spread apart (`spread`, in the axes' own scale) so that
    none overlaps another, with a thin leader where a label moved. Where they cannot all fit in the panel's
    height, a legend of these lines instead. Call after plotting: it freezes the axis limits."""
    gap = 1.1 * gap_pt / _freeze(ax)  # in axes fraction
    if len(lines) * gap > 1:
        return panel_legend(ax, handles=list(lines), labels=list(labels))
    return _annotate_spread(ax, [(ln.get_xdata()[-1], ln.get_ydata()[-1]) for ln in lines], labels,
                            [ln.get_color() for ln in lines], gap, pad_pt, LEGEND["fontsize"])


def label_points(ax, xs, ys, labels, colors, gap_pt: float = 5.5, pad_pt: float = 3.0, fontsize: float = 5,
                 together: bool = False):
    """Short labels just right of points; those at the same x (`together`: all of them) spread apart so that
    none overlaps another. Call after plotting: it freezes the axis limits."""
    gap = 1.1 * gap_pt / _freeze(ax)
    if together:
        return _annotate_spread(ax, list(zip(xs, ys)), list(labels), list(colors), gap, pad_pt, fontsize)
    texts = []
    for x in dict.fromkeys(xs):
        i = [j for j, xj in enumerate(xs) if xj == x]
        texts += _annotate_spread(ax, [(xs[j], ys[j]) for j in i], [labels[j] for j in i], [colors[j] for j in i],
                                  gap, pad_pt, fontsize)
    return texts


VERDICT_RULE = "seed-aware rule (the paper's where a row lacks seeds)"


def verdict(frame: pd.DataFrame, prefix: str = "") -> pd.Series:
    """Each row's verdict as the figures show it (VERDICT_RULE): `<prefix>verdict_seeds` where known, else
    `<prefix>verdict` (the analysis's columns; prefix "opd_" for the RL table's OPD columns)."""
    seeds = frame[f"{prefix}verdict_seeds"] if f"{prefix}verdict_seeds" in frame else None
    paper = frame[f"{prefix}verdict"]
    return paper if seeds is None else seeds.where(seeds.notna(), paper)


def input_hashes(inputs) -> dict[str, str]:
    return {str(p): provenance.sha256_file(p) for p in inputs}


def input_sidecar(path, inputs) -> None:
    """`<name>.inputs.json` beside an output: the sha256 of every input it was made from."""
    path = Path(path)
    store.write_json({"output": path.name, "inputs": input_hashes(inputs)}, path.with_suffix(".inputs.json"))


def write_png(fig, path, text: dict[str, str]) -> None:
    """The figure as an opaque RGB PNG with `text` chunks: matplotlib writes RGBA, and on these white figures the
    alpha channel carries nothing but a quarter of the pixels' bytes."""
    from PIL import Image, PngImagePlugin
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    rgba = Image.open(buf).convert("RGBA")
    info = PngImagePlugin.PngInfo()
    for k, v in text.items():
        info.add_text(k, v)
    Image.alpha_composite(Image.new("RGBA", rgba.size, "white"), rgba).convert("RGB").save(
        path, format="png", pnginfo=info, optimize=True, dpi=(PNG_DPI, PNG_DPI))


def save_figure(fig, pdf, png, inputs) -> None:
    """PDF and PNG written atomically, both carrying the sha256 of every input."""
    hashes = input_hashes(inputs)
    subject = json.dumps(hashes, sort_keys=True)
    store.atomic_write(Path(pdf), lambda tmp: fig.savefig(
        tmp, format="pdf", metadata={"Subject": subject, "Creator": "opd-budget", "CreationDate": None}))
    store.atomic_write(Path(png), lambda tmp: write_png(fig, tmp, {"Description": subject, "Software": "opd-budget"}))
    input_sidecar(Path(png), inputs)
    pyplot().close(fig)
    print(f"{Path(png).stem}: figure from {len(hashes)} inputs -> {pdf} ({Path(pdf).stat().st_size / 1e3:.0f} kB), "
          f"{png} ({Path(png).stat().st_size / 1e3:.0f} kB)", flush=True)  # the job's one-line summary, in its log


def rows_frame(path) -> pd.DataFrame:
    """The analysis's rows.parquet with what opd.rows.Row says of each row: its family (mismatch source),
    whether the budget is measured on it, its engine (numerics and staleness), and whether it is guarded (the
    mismatch guard: its steps mix the row's engine and the action's)."""
    rows = store.read_table(path)
    R = [Row.of(r) for r in rows.to_dict("records")]
    return rows.assign(family=[r.family for r in R], in_budget=[r.in_budget for r in R], role=[r.role for r in R],
                       engine_key=[r.engine_key for r in R], guarded=[r.guard is not None for r in R])


def _fmt(v, digits: int):
    if isinstance(v, (float, np.floating)):
        if np.isnan(v):
            return "–"
        return f"{v:.{digits}g}" if abs(v) < 1e-3 and v != 0 else f"{v:.{digits}f}"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    return str(v)


TABLE_CSS = ("body{font-family:system-ui,sans-serif;font-size:13px;margin:12px;color:#222}"
             "table{border-collapse:collapse}caption{font-weight:600;text-align:left;padding-bottom:6px}"
             "th,td{padding:3px 8px;border-bottom:1px solid #ddd;text-align:left;white-space:nowrap}"
             "thead th{border-bottom:2px solid #444;position:sticky;top:0;background:#fff}"
             "tbody tr:nth-child(even){background:#f6f6f6}p.notes{max-width:60em;color:#444}")


def table_html(cells: pd.DataFrame, caption: str, notes: str = "") -> str:
    """A table (cells already formatted as text) as a self-contained HTML page: what the report shows."""
    esc = html.escape
    head = "".join(f"<th>{esc(str(c))}</th>" for c in cells.columns)
    body = "".join("<tr>" + "".join(f"<td>{esc(str(v))}</td>" for v in row) + "</tr>\n"
                   for row in cells.itertuples(index=False))
    parts = [f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{esc(caption)}</title>',
             f"<style>{TABLE_CSS}</style></head><body>",
             f'<table data-rows="{len(cells)}"><caption>{esc(caption)}</caption>',
             f"<thead><tr>{head}</tr></thead>\n<tbody>\n{body}</tbody></table>"]
    if not len(cells):
        parts.append('<p class="empty">(no rows)</p>')
    if notes:
        parts.append(f'<p class="notes">{esc(notes)}</p>')
    return "".join(parts) + "</body></html>\n"


def save_table(df: pd.DataFrame, md, tex, inputs, caption: str, digits: int = 4, notes: str = "",
               html_path=None) -> None:
    """Markdown (with a caption line and notes), a LaTeX tabular and an HTML page (the report shows it;
    `html_path`, by default the Markdown file's with .html), all atomically."""
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
    page = table_html(cells, caption, notes)
    store.atomic_write(Path(md), lambda tmp: Path(tmp).write_text(md_text))
    store.atomic_write(Path(tex), lambda tmp: Path(tmp).write_text("\n".join(lines)))
    store.atomic_write(Path(html_path or Path(md).with_suffix(".html")), lambda tmp: Path(tmp).write_text(page))
    input_sidecar(Path(md), inputs)
    print(f"{Path(md).stem}: table of {len(df)} rows x {len(df.columns)} columns -> {md}, {tex}, "
          f"{html_path or Path(md).with_suffix('.html')}", flush=True)  # the job's one-line summary, in its log


_INLINE = [(re.compile(r"`([^`]+)`"), r"<code>\1</code>"), (re.compile(r"\*\*(.+?)\*\*"), r"<strong>\1</strong>"),
           (re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)"), r'<a href="\2">\1</a>')]


def _inline(text: str) -> str:
    text = html.escape(text)
    for pattern, repl in _INLINE:
        text = pattern.sub(repl, text)
    return text


def markdown_html(text: str, title: str) -> str:
    """The Markdown the pipeline writes itself (findings.md: headings, bullet lists whose items may wrap onto
    indented lines, paragraphs, pipe tables whose second line is the |---| rule; inline **bold**, `code` and
    [links](url)) as a self-contained HTML page, every character escaped. Not a general Markdown renderer: other
    syntax shows as its text."""
    blocks, item = [], None  # item: the bullet being collected, or a paragraph's lines

    def close():
        nonlocal item
        if item is not None:
            kind, lines = item
            blocks.append((kind, lines if kind == "table" else " ".join(lines)))
            item = None

    for line in text.splitlines():
        heading = re.match(r"^(#{1,4})\s+(.*)$", line)
        if line.startswith("|"):
            cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if item is None or item[0] != "table":
                close()
                item = ("table", [])
            if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                item[1].append(cells)
        elif heading:
            close()
            blocks.append((f"h{len(heading.group(1))}", heading.group(2)))
        elif re.match(r"^[-*]\s+", line):
            close()
            item = ("li", [re.sub(r"^[-*]\s+", "", line)])
        elif not line.strip():
            close()
        elif item is not None and item[0] != "table" and (item[0] == "p" or line.startswith((" ", "\t"))):
            item[1].append(line.strip())
        else:
            close()
            item = ("p", [line.strip()])
    close()
    body, in_list = [], False
    for kind, content in blocks:
        if (kind == "li") != in_list:
            body.append("<ul>" if kind == "li" else "</ul>")
            in_list = kind == "li"
        if kind == "table":
            row = lambda cells, tag: "<tr>" + "".join(f"<{tag}>{_inline(c)}</{tag}>" for c in cells) + "</tr>"  # noqa: E731
            body.append(f'<table class="md"><thead>{row(content[0], "th")}</thead><tbody>'
                        + "".join(row(r, "td") for r in content[1:]) + "</tbody></table>")
        else:
            body.append(f"<{kind}>{_inline(content)}</{kind}>")
    if in_list:
        body.append("</ul>")
    return (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{TABLE_CSS}li{{margin:4px 0;max-width:60em}}h1{{font-size:16px}}"
            f"table.md td{{white-space:normal;vertical-align:top;max-width:40em}}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")


def text_html(text: str, title: str) -> str:
    """Plain text (a configuration file) as a self-contained HTML page, with a title line."""
    return (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{TABLE_CSS}pre{{font-size:12px;line-height:1.35}}</style></head><body>\n"
            f"<h1 style=\"font-size:15px\">{html.escape(title)}</h1>\n<pre>{html.escape(text)}</pre>\n</body></html>\n")
