"""Derived analysis files are the same bytes on any x86-64 CPU (opd/derived.py).

numpy and OpenBLAS choose their vector kernels by the CPU at run time; on this test's machine a second
floating-point path is taken by switching those kernels off (numpy's NPY_DISABLE_CPU_FEATURES, OpenBLAS's
OPENBLAS_CORETYPE), which is what an AVX2 machine computes where this one has AVX-512. The test shows the
path changes unrounded derived floats, then that the analysis stage writes byte-identical files on both."""
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import ROOT, snakemake
from opd import derived

# numpy's dispatched kernels above the x86-64-v2 baseline, and an OpenBLAS kernel every x86-64-v2 CPU runs
NUMPY_FEATURES = ("X86_V3", "X86_V4", "AVX512_ICL", "AVX512_SPR", "AVX2", "FMA3", "AVX512F", "AVX512_SKX")
OPENBLAS_OTHER = "Nehalem"


def other_path_env() -> dict:
    found = np._core._multiarray_umath.__cpu_features__  # numpy's own record of what this CPU has
    off = [f for f in NUMPY_FEATURES if found.get(f)]
    return {**os.environ, "NPY_DISABLE_CPU_FEATURES": " ".join(off), "OPENBLAS_CORETYPE": OPENBLAS_OTHER}


def test_round_float_keeps_nine_significant_digits():
    assert derived.round_float(0.1234567894999) == 0.123456789
    assert derived.round_float(-1.23456789051e-7) == -1.23456789e-7
    assert derived.round_float(0.0) == 0.0 and math.copysign(1, derived.round_float(-0.0)) == -1
    assert math.isnan(derived.round_float(float("nan"))) and derived.round_float(float("inf")) == float("inf")
    # one ulp either way of a value rounds to the same float, unless a rounding boundary lies in between
    x = 0.0416908123
    assert derived.round_float(np.nextafter(x, 1)) == derived.round_float(np.nextafter(x, 0)) == x


def test_rounded_touches_floats_only():
    df = pd.DataFrame({"a": [1 / 3, float("nan")], "n": [1, 2], "s": ["x", "y"],
                       "f32": np.array([1 / 3, 2 / 3], dtype=np.float32)})
    r = derived.rounded(df)
    assert r["a"].iloc[0] == 0.333333333 and math.isnan(r["a"].iloc[1])
    assert r["n"].tolist() == [1, 2] and r["s"].tolist() == ["x", "y"] and r["f32"].dtype == np.float32
    assert df["a"].iloc[0] == 1 / 3  # the input is left alone
    assert derived.rounded_json({"x": [2 / 3, {"y": 1e-20 / 3}], "k": 3}) == {"x": [0.666666667, {"y": 3.33333333e-21}],
                                                                            "k": 3}


VERDICTS = """
import glob, sys, pandas as pd, yaml
from opd import stats
from opd.spec import Experiment
from opd.rows import Row
cfg = yaml.safe_load(open("config.yaml")); e = cfg["experiments"]["toy"]; b = e["bootstrap"]
R = [Row.of(r) for r in e["rows"]]
opd = [r.name for r in R if r.algorithm == "opd"]
runs = sorted(glob.glob("results/toy/runs/*/steps.parquet"))  # every committed run, as the analysis concatenates them
st = pd.concat([pd.read_parquet(p) for p in runs], ignore_index=True)
held = pd.concat([pd.read_parquet(p.replace("steps.parquet", "heldout.parquet")) for p in runs], ignore_index=True)
v = stats.verdicts(held[held.config.isin(opd)], st[st.config.isin(opd)], Experiment.of(cfg, "toy").baseline.name, tau=e["tau"],
                   n_boot=b["resamples"], ci=b["level"], seed=b["seed"], references={r.name: r.reference for r in R if r.reference})
v.to_parquet(sys.argv[1])
"""


def test_the_cpu_path_moves_unrounded_floats_and_not_rounded_ones(tmp_path):
    """The second path changes some bootstrap interval in its last bits (else this CPU has no second kernel and
    the test says so); rounded, every value is the same."""
    runs = {}
    for name, env in (("default", dict(os.environ)), ("other", other_path_env())):
        out = tmp_path / f"{name}.parquet"
        subprocess.run([sys.executable, "-c", VERDICTS, str(out)], cwd=ROOT, env=env, check=True)
        runs[name] = pd.read_parquet(out)
    a, b = runs["default"], runs["other"]
    floats = [c for c in a.columns if a[c].dtype.kind == "f"]
    moved = {c: float(np.nanmax(np.abs(a[c] - b[c]))) for c in floats if not a[c].equals(b[c])}
    if not moved:
        pytest.skip("this CPU gives numpy and OpenBLAS no second floating-point path to compare")
    rel = max(float(np.nanmax(np.abs((a[c] - b[c]) / a[c].where(a[c] != 0)))) for c in moved)
    # the chance that rounding splits a moved value: |difference| / the rounding step at its magnitude
    x = np.concatenate([a[c].to_numpy() for c in moved])
    dx = np.abs(x - np.concatenate([b[c].to_numpy() for c in moved]))
    step = 10.0 ** (np.floor(np.log10(np.abs(np.where(x == 0, 1.0, x)))) - (derived.SIGNIFICANT_DIGITS - 1))
    p_cross = float(np.nansum(np.where(dx > 0, dx / step, 0.0)))
    print(f"unrounded columns that moved: {moved}; {int((dx > 0).sum())} of {a[floats].size} floats; largest relative "
          f"difference {rel:.2g}; expected rounding boundaries crossed {p_cross:.2g}")
    assert rel < 1e-12  # last bits only: the same computation
    assert p_cross < 1e-3
    assert (a.select_dtypes(exclude="float") == b.select_dtypes(exclude="float")).all().all()  # verdicts
    assert derived.rounded(a).equals(derived.rounded(b))


ANALYSIS = ["results/toy/analysis/guard.parquet", "results/toy/analysis/kv_attribution.parquet"]


def test_analysis_files_are_byte_identical_on_another_cpu_path(toy_clone):
    """The analysis stage run twice in a fresh clone, on this CPU's kernels and on the other path: every file it
    writes has the same bytes (the derived tables rounded, the concatenated run files as the runs wrote them)."""
    clone = toy_clone  # the toy experiment selected: its rows and results/toy
    written = {}
    for name, env in (("default", None), ("other", other_path_env())):
        r = subprocess.run([sys.executable, "-m", "snakemake", "-c", "2", "--forcerun", "analysis", "guard_analysis",
                            "kv_attribution", "--", *ANALYSIS], cwd=clone, env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-3000:]
        folder = clone / "results/toy/analysis"
        written[name] = {f.name: f.read_bytes() for f in sorted(folder.iterdir()) if f.is_file()}
    assert written["default"].keys() == written["other"].keys()
    differ = [f for f in written["default"] if written["default"][f] != written["other"][f]]
    assert not differ, f"written differently on the second floating-point path: {differ}"


# ---------------------------------------------------------------- figures: log axes with the same bits on any CPU

def test_exact_log_and_exp_are_accurate():
    from opd.plotmath import exact_exp, exact_log
    x = np.concatenate([np.random.default_rng(0).random(20000) * 10, np.logspace(-300, 300, 601), [1.0, 10.0]])
    assert np.max(np.abs(exact_log(x) - np.log(x)) / np.maximum(np.abs(np.log(x)), 1e-300)) < 1e-15
    assert exact_log(1.0) == 0.0
    y = np.linspace(-700, 700, 20001)
    assert np.max(np.abs(exact_exp(y) - np.exp(y)) / np.exp(y)) < 1e-15
    with np.errstate(divide="ignore", invalid="ignore"):
        specials = np.array([0.0, -1.0, np.inf, np.nan])
        assert np.array_equal(exact_log(specials), np.log(specials), equal_nan=True)
    assert np.array_equal(exact_exp(np.array([np.inf, -np.inf, np.nan])), [np.inf, 0.0, np.nan], equal_nan=True)


SCATTER = """
import hashlib, sys, numpy as np
from opd import plotmath, report
x = np.random.default_rng(1).lognormal(size=5000); y = np.random.default_rng(2).lognormal(size=5000)
fig, ax = report.figure()
ax.scatter(x, y, s=2)
ax.set_xscale(sys.argv[2]); ax.set_yscale(sys.argv[2])
d = fig.add_axes([0.6, 0.6, 0.3, 0.3]); d.plot(np.arange(200), np.linspace(-10, 2000, 200)); report.delta_axis(d, [-10, 2000])
fig.savefig(sys.argv[1] + ".pdf", metadata={"CreationDate": None}); fig.savefig(sys.argv[1] + ".png")
pts = np.concatenate([ax.transData.transform(np.column_stack([x, y])), d.transData.transform(d.lines[0].get_xydata())])
print(hashlib.sha256(pts.tobytes()).hexdigest())
"""


def test_a_log_figure_has_the_same_bytes_on_another_cpu_path(tmp_path):
    """matplotlib's own log scale draws numpy's log10, whose kernels differ between CPUs; plotmath's scales do
    not: on the other path every drawn coordinate has the same bits and the figure the same bytes (PDF, PNG)."""
    out = {}
    for scale in ("log", "opd_log"):
        for name, env in (("default", dict(os.environ)), ("other", other_path_env())):
            stem = tmp_path / f"{scale}-{name}"
            r = subprocess.run([sys.executable, "-c", SCATTER, str(stem), scale], cwd=ROOT, env=env, check=True,
                               capture_output=True, text=True)
            out[scale, name] = (r.stdout, stem.with_suffix(".pdf").read_bytes(), stem.with_suffix(".png").read_bytes())
    if out["log", "default"][0] == out["log", "other"][0]:
        pytest.skip("this CPU gives numpy's log10 no second kernel: nothing to compare")
    assert out["opd_log", "default"] == out["opd_log", "other"]
