"""`snakemake --report` for a small experiment, opened in a real browser (headless Chromium, Debian's
`chromium` package, driven over its DevTools pipe by tests/chromium.py): every result of the report is
opened through the page's own menu, every figure must load (no broken image: the PNG's size and pixels), every
table must show its rows, every caption must be there. A screenshot of each view is kept in pytest's cache
folder (.pytest_cache/d/report/; the test prints the path and records it as a property for JUnit XML)."""
import json
import os
import re
import struct
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from chromium import Chromium, ProtocolError, find_browser
from conftest import ROOT, snakemake
from opd import outputs as O

CAPTIONS = ROOT / "workflow" / "report"


@pytest.fixture(scope="module")
def browser():
    exe = find_browser()
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("no Chromium on a CI machine: .ci/run installs Debian's `chromium`; it must not be skipped")
        pytest.skip("no Chromium found (chromium, chromium-browser, google-chrome on PATH), so the report is not "
                    "checked in a browser here: `apt-get install -y chromium` on Debian (.ci/run does)")
    return exe


def expected_results(experiment: dict, fig: str) -> dict[str, str]:
    """What the report must hold, path -> category: from opd/outputs.py's table and the rules outside it."""
    want = {}
    for o in O.selected(experiment):
        folder = fig if o.kind == "figure" else f"{fig}/tables"
        want[f"{folder}/{o.name}.{o.shown}"] = o.category
    if experiment["backend"] == "tiny":
        want.update({f"{fig}/mechanism.png": O.MECHANISM, f"{fig}/tables/mechanism.html": O.MECHANISM,
                     f"{fig}/tables/mechanism_runs.html": O.MECHANISM})
    want.update({f"{fig}/findings.html": O.FINDINGS, f"{fig}/tables/run_provenance.html": O.INFRA,
                 f"{fig}/config_used.html": O.INFRA})
    return want


def caption_file(path: str) -> Path:
    stem = Path(path).stem
    if path.endswith(".png"):
        return CAPTIONS / f"figure_{stem}.rst"
    if "/tables/" in path and stem not in ("run_provenance",):
        return CAPTIONS / f"table_{stem}.rst"
    return CAPTIONS / f"{stem}.rst"


def result_kind(path: str) -> str:
    """The kind the report's menu gives a result (workflow/rules/common.smk's `reported`)."""
    if path.endswith(".png"):
        return "figure"
    return "text" if Path(path).stem in ("findings", "config_used") else "table"


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", head[16:24])


BANDS = 16
# the image on a canvas: the sum of R + G + B over each of BANDS horizontal bands, as the browser decoded it
PIXELS = f"""(() => {{ const i = document.querySelector('.grow img'), c = document.createElement('canvas');
  c.width = i.naturalWidth; c.height = i.naturalHeight;
  const x = c.getContext('2d'); x.drawImage(i, 0, 0);
  const d = x.getImageData(0, 0, c.width, c.height).data, out = new Array({BANDS}).fill(0);
  for (let y = 0; y < c.height; y++) {{
    const b = Math.floor(y * {BANDS} / c.height);
    for (let k = y * c.width * 4; k < (y + 1) * c.width * 4; k += 4) out[b] += d[k] + d[k + 1] + d[k + 2];
  }}
  return out; }})()"""


def pixel_bands(path: Path) -> np.ndarray:
    """The same sums from the PNG file, decoded by Pillow."""
    rgb = np.asarray(Image.open(path).convert("RGB"), dtype=np.int64).sum(axis=2)
    band = np.arange(rgb.shape[0]) * BANDS // rgb.shape[0]
    return np.array([rgb[band == b].sum() for b in range(BANDS)])


def markdown_rows(path: Path) -> int:
    """Data rows of the Markdown table a table script wrote (its lines starting with '|', less the header
    and the rule under it)."""
    lines = [ln for ln in path.read_text().splitlines() if ln.startswith("|")]
    return max(0, len(lines) - 2)


LOADED = ("typeof app !== 'undefined' && typeof results !== 'undefined' && "
          "document.querySelector('#loading-screen').style.display === 'none' && "
          "document.querySelector('nav') !== null")


def click(page, js_element: str, what: str):
    """Clicks an element found by a JavaScript expression, waiting for it to appear."""
    page.wait_for(f"!!({js_element})", timeout=20, what=what)
    page.eval(f"({js_element}).click()")


def frame_context(page, path: str) -> int:
    """An execution context in the frame showing an HTML result, once its document has loaded."""
    deadline = time.monotonic() + 20
    while True:
        frames = [f for f in page.frames() if f.get("url", "").startswith("data:text/html")]
        if len(frames) == 1:
            try:
                ctx = page.frame_context(frames[0]["id"])
                if page.eval("document.readyState", ctx) == "complete":
                    return ctx
            except ProtocolError:  # the frame navigated away while we looked
                pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path}: no loaded frame ({len(frames)} frames)")
        time.sleep(0.1)


def check_in_browser(exe: str, root: Path, report: Path, want: dict[str, str], shots: Path, profile: Path) -> int:
    """Opens the report in headless Chromium and every result in `want` (path -> category) through the
    page's menu: figures load at their PNG's size, tables show the rows their Markdown has, the findings
    every sentence, the configuration the config file; each result's caption is in its info panel. A
    screenshot of every view goes to `shots`. Returns the number of results checked."""
    profile.mkdir(exist_ok=True)
    with Chromium(exe, profile) as chromium:
        page = chromium.open(report.resolve().as_uri())
        page.wait_for(LOADED, timeout=60, what="the report's app to render")
        listed = page.eval("Object.keys(results)")
        cats = page.eval("categories")
        assert set(listed) == set(want)
        assert {p: c for c, subs in cats.items() for ps in subs.values() for p in ps} == want
        # the landing page: the workflow description, with a link to each category the report has
        desc = page.eval("document.querySelector('.prose').innerText")
        assert "experiment toy" in desc and "τ = 20%" in desc
        links = page.eval("[...document.querySelectorAll('.prose a')].map(a => a.innerText)")
        assert set(want.values()) <= set(links), links
        assert page.eval("[...document.images].every(i => i.complete && i.naturalWidth > 0)")
        page.screenshot(shots / "00-landing.png")

        for n, (path, category) in enumerate(sorted(want.items(), key=lambda kv: (kv[1], kv[0])), start=1):
            name = Path(path).name
            # home (the menu), the category in it, then the result's view button in the category's list
            click(page, "document.querySelector('nav ol li a')", "the home button")
            click(page, f"[...document.querySelectorAll('nav a')].find(a => a.innerText.trim() === {json.dumps(category)})",
                  f"the menu entry of category {category}")
            # the menu lists a result by its caption's title and its kind, not its path
            label = f"{O.caption_title(caption_file(path))} ({result_kind(path)})"
            row = (f"[...document.querySelectorAll('nav table tbody tr')]"
                   f".find(r => r.cells[0].innerText.trim() === {json.dumps(label)})")
            click(page, f"{row} && {row}.querySelector('a[iconname=eye]')", f"the view button of {path}")
            if path.endswith(".png"):
                img = "document.querySelector('.grow img')"
                page.wait_for(f"{img} && {img}.src.startsWith('data:image/png') && {img}.complete",
                              what=f"{path} to load")
                w, h = page.eval(f"[{img}.naturalWidth, {img}.naturalHeight]")
                assert (w, h) == png_size(root / path), f"{path}: broken or wrong image in the report"
                # what the browser shows is the figure, every band of it (a truncated PNG still has its size)
                shown, drawn = np.array(page.eval(PIXELS), dtype=float), pixel_bands(root / path)
                assert np.allclose(shown, drawn, rtol=0.01), f"{path}: the page shows other pixels than the file"
            else:
                ctx = frame_context(page, path)
                if name == "findings.html":
                    shown = page.eval("document.querySelectorAll('li').length", ctx)
                    md = (root / path).with_suffix(".md").read_text().splitlines()
                    expect = sum(ln.startswith("- ") for ln in md)
                    assert shown == expect > 0, f"{path}: {shown} findings shown, {expect} written"
                elif name == "config_used.html":
                    text = page.eval("document.querySelector('pre').innerText", ctx)
                    assert yaml.safe_load(text) == yaml.safe_load((root / "config.yaml").read_text())
                else:
                    shown = page.eval("document.querySelectorAll('table tbody tr').length", ctx)
                    header = page.eval("document.querySelectorAll('table thead th').length", ctx)
                    expect = markdown_rows((root / path).with_suffix(".md"))
                    assert shown == expect > 0 and header > 1, f"{path}: {shown} rows shown, {expect} in the table"
            # its caption, from workflow/report/, in the result's info panel beside it
            first = re.search(r"\*\*(.+?)\*\*", caption_file(path).read_text()).group(1)
            click(page, f"{row} && {row}.querySelector('a[iconname=information-circle]')", f"the info button of {path}")
            page.wait_for(f"document.querySelector('nav').innerText.includes({json.dumps(first)})",
                          what=f"the caption of {path}")
            page.screenshot(shots / f"{n:02d}-{category.replace(' ', '_')}-{name}.png")
        errors = [e["params"] for e in chromium.events if e.get("method") == "Runtime.exceptionThrown"]
        assert not errors, errors
    return len(want)


def test_report_of_a_small_experiment_renders_in_chromium(browser, small_toy_clone, tmp_path, request):
    # conftest.small_toy: one student, the standard engine (2 seeds) and noise-15, 3 short runs, whose training
    # and analysis small_toy_built ran (`snakemake -c 2 analysis` in a fresh clone); this build makes the rest
    t0 = time.monotonic()
    clone = small_toy_clone
    experiment = yaml.safe_load((clone / "config.yaml").read_text())["experiments"]["toy"]
    snakemake(clone, "-c", "2")
    t_build = time.monotonic() - t0
    # a file of the DAG checked out from git has no Snakemake job record (the committed results of a fresh clone):
    # the base models' base.json made so by Snakemake's own --cleanup-metadata (this build trained them)
    unrecorded = "results/toy/_models/qwen-s/base.json"
    snakemake(clone, "-c", "2", "--cleanup-metadata", unrecorded)
    r = snakemake(clone, "-c", "2", "--report", "figures/toy/report.html")
    assert "Report created." in r.stdout + r.stderr
    report = clone / "figures" / "toy" / "report.html"
    want = expected_results(experiment, "figures/toy")
    # no warning per file without a job record: one line, and the files listed (opd.smk)
    out = r.stdout + r.stderr
    assert "Missing metadata" not in out
    assert re.search(r"^\d+ files of the DAG have no Snakemake job record", out, re.M), out[-2000:]
    # every result shown was made by this build: a file the DAG did not remake (one checked out from the
    # toy's results) has no Snakemake metadata, and the report would show the toy's numbers as this one's
    missing = set((clone / ".snakemake/opd/report-unrecorded.txt").read_text().split())
    assert unrecorded in missing
    assert not missing & set(want), f"results in the report that this build did not make: {sorted(missing & set(want))}"
    cache = getattr(request.config, "cache", None)  # None under -p no:cacheprovider
    shots = Path(cache.mkdir("report")) if cache else tmp_path / "screenshots"
    shots.mkdir(exist_ok=True)
    for old in shots.glob("*.png"):
        old.unlink()
    n = check_in_browser(browser, clone, report, want, shots, tmp_path / "profile")
    print(f"\nreport: {report.stat().st_size / 1e6:.1f} MB, {n} results; pipeline after the analysis {t_build:.0f} s, "
          f"all {time.monotonic() - t0:.0f} s; screenshots in {shots}")
    request.node.user_properties.append(("screenshots", str(shots)))


def test_every_output_has_a_caption_and_a_category():
    assert len(set(O.CATEGORIES)) == len(O.CATEGORIES)
    for o in O.OUTPUTS:
        assert (ROOT / o.caption).exists(), f"{o.rule}: no caption {o.caption}"
        assert re.search(r"\*\*(.+?)\*\*", (ROOT / o.caption).read_text()), f"{o.caption}: no bold first phrase"
    names = [p.stem for p in CAPTIONS.glob("*.rst")]
    extras = {"workflow", "findings", "run_provenance", "config_used", "figure_mechanism", "table_mechanism",
              "table_mechanism_runs"}
    assert set(names) == {o.rule for o in O.OUTPUTS} | extras  # no caption of an output that no longer exists
    description = (CAPTIONS / "workflow.rst").read_text()
    for c in O.CATEGORIES:
        assert f'("{c}",' in description, f"category {c} is not described in workflow.rst"
