"""findings.md as an HTML page: the report's "Findings" entry (opd.report.markdown_html)."""
from pathlib import Path

from opd import report, scripts, store


def main(inp, out, params):
    text = Path(inp[0]).read_text()
    page = report.markdown_html(text, f"Findings: {params.experiment}")
    store.atomic_write(Path(out[0]), lambda tmp: Path(tmp).write_text(page))
    print(f"findings_html: {sum(ln.startswith('- ') for ln in text.splitlines())} findings -> {out[0]}")


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
