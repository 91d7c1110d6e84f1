"""Derived analysis files, written so that the same runs give the same bytes on any x86-64 CPU.

The analysis reads the runs' Parquet files and derives verdicts, intervals, budgets, the admission record
and the rest. numpy and OpenBLAS pick their vector kernels by the CPU at run time (AVX2, AVX-512), and
two kernels may sum in different orders, so a derived float can differ in its last bits between two
machines. Every derived table and JSON record is therefore written with its floats rounded to
SIGNIFICANT_DIGITS significant digits by Python's correctly rounded decimal conversion, which is the same
on every CPU.

A value lands on different sides of a rounding boundary on two CPUs only if a boundary lies between its
two values: for a difference dx at a value whose rounding step is u, with probability dx / u (at most
r x 10^SIGNIFICANT_DIGITS for a relative difference r). `tests/test_derived.py` measures it on the toy's
verdicts (the bootstrap intervals are where kernels disagree) with a second kernel path, prints the
expected number of crossed boundaries over all moved values and requires it below 1e-3. Nine digits are
far finer than any number's uncertainty and than what any table, figure or finding prints.

Only derived files are rounded: the runs' own files (steps, heldout, probes) and the analysis's
concatenations of them are written as the runs wrote them, never rounded. The computations use the
unrounded values; a verdict is decided before its numbers are rounded."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from opd import store

SIGNIFICANT_DIGITS = 9


def round_float(x: float) -> float:
    """x to SIGNIFICANT_DIGITS significant digits (NaN, infinities and signed zeros as they are)."""
    if not math.isfinite(x) or x == 0.0:
        return x
    return float(f"{x:.{SIGNIFICANT_DIGITS}g}")


def rounded(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of df with every floating-point column rounded (round_float); other columns untouched."""
    out = df.copy()
    for c in out.columns:
        if pd.api.types.is_float_dtype(out[c].dtype):
            values = out[c].to_numpy(dtype=np.float64, na_value=np.nan)
            out[c] = pd.Series([round_float(float(v)) for v in values], index=out.index).astype(out[c].dtype)
    return out


def rounded_json(obj):
    """obj with every float inside it (dicts, lists) rounded (round_float)."""
    if isinstance(obj, float):
        return round_float(obj)
    if isinstance(obj, dict):
        return {k: rounded_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [rounded_json(v) for v in obj]
    return obj


def write_table(df: pd.DataFrame, path, schema=None, inputs: dict | None = None) -> None:
    """A derived table: store.write_table of its rounded copy (with `inputs`, the record of what it was computed
    from)."""
    store.write_table(rounded(df), path, schema, inputs)


def write_json(obj, path) -> None:
    """A derived JSON record: store.write_json of its rounded copy."""
    store.write_json(rounded_json(obj), path)
