""""Did my regeneration reproduce the results?": two verdict tables of one experiment, row by row.

`python -m opd.cli compare FIRST SECOND` reads each side as a verdicts.parquet file, a results directory
(results/<experiment>, whose analysis/verdicts.parquet it reads) or a git revision's file (`HEAD:results/toy/
analysis/verdicts.parquet`, read with `git show`, so the committed results need no checkout). It prints every
row whose verdict changed or whose second Delta lies outside the first's interval, then one summary line:
how many verdicts agree, how many second Deltas lie inside the first's interval, and how many changes exceed
1.96 standard errors against the ~5% expected by chance (opd.stats.regeneration_agreement). Exit status 0 when
every second Delta lies inside the first's interval, 1 when one does not, 2 when a side cannot be read."""
from __future__ import annotations

import io
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd

from opd import stats, store
from opd.outputs import analysis_path

VERDICTS = Path(analysis_path(".", "verdicts"))  # analysis/verdicts.parquet, in a results directory


class Unreadable(Exception):
    """A side of the comparison is neither a verdict table, a results directory nor a git revision's file."""


def read_verdicts(source: str) -> pd.DataFrame:
    """A verdict table from a file, a results directory or `REV:PATH` (a git revision's file)."""
    p = Path(source)
    if p.is_dir():
        p = p / VERDICTS
    if p.is_file():
        return store.read_table(p)
    if ":" in source:
        r = subprocess.run(["git", "show", source], capture_output=True)
        if r.returncode == 0:
            return pd.read_parquet(io.BytesIO(r.stdout))
        raise Unreadable(f"{source}: git show failed: {r.stderr.decode(errors='replace').strip()}")
    raise Unreadable(f"{source}: no such file or results directory (a results directory holds {VERDICTS})")


def _pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def render(first: pd.DataFrame, second: pd.DataFrame, rule: str, names: tuple[str, str]) -> tuple[list[str], bool]:
    """The report's lines, and whether every second Delta lies inside the first's interval."""
    t = stats.regeneration_agreement(first, second, rule)
    keys = [set(map(tuple, f[f["config"] != f["reference"]][["student", "config"]].to_numpy())) for f in (first, second)]
    same = t["verdict_1"].eq(t["verdict_2"]).to_numpy()
    outside = t["within"].eq(False).to_numpy()
    lines = [f"{stats.RULE_NAMES[rule]}: {names[0]} -> {names[1]}"]
    for i in np.flatnonzero(~same | outside):
        r = t.iloc[i]
        why = [w for w, on in (("verdict changed", not same[i]), ("outside the first's interval", outside[i])) if on]
        lines.append(f"  {r.student} {r.config}: {r.verdict_1} -> {r.verdict_2}, Δ {_pct(r.delta_1)} "
                     f"[{_pct(r.ci_lo_1)}, {_pct(r.ci_hi_1)}] -> {_pct(r.delta_2)} (z = {r.z:+.1f}): {', '.join(why)}")
    for side, only in (("first", keys[0] - keys[1]), ("second", keys[1] - keys[0])):
        if only:
            lines.append(f"  only in the {side}: " + ", ".join(f"{s} {c}" for s, c in sorted(only)))
    z = t["z"].to_numpy(float)
    n_z = int(np.isfinite(z).sum())
    n_in = int(t["within"].notna().sum())
    lines.append(f"{len(t)} rows in both: {int(same.sum())} same verdict; {n_in - int(outside.sum())} of {n_in} "
                 f"second Δ inside the first's interval; {int((np.abs(z) > stats.Z95).sum())} of {n_z} changes beyond "
                 f"1.96 SE ({0.05 * n_z:.1f} expected by chance)")
    return lines, not outside.any()


# what a verdict table holds that a comparison reads (opd.stats.regeneration_agreement): the rule's columns too
VERDICT_COLUMNS = ("student", "config", "reference", "delta")


def checked(table: pd.DataFrame, source: str, rule: str) -> pd.DataFrame:
    """A side of the comparison, refused (Unreadable, naming the side and the columns) unless it is a verdict table
    with the rule's columns."""
    want = [*VERDICT_COLUMNS, *stats.RULE_COLUMNS[rule]]
    missing = [c for c in want if c not in table.columns]
    if missing:
        raise Unreadable(f"{source}: not a verdict table (analysis/verdicts.parquet): no column(s) {', '.join(missing)}")
    return table


def taus(tables: list[pd.DataFrame], names) -> None:
    """Refuse two tables at different tau (a verdict at one tau says nothing about one at another); a table written
    before verdicts carried tau is taken as it is."""
    at = [set(t["tau"].unique()) if "tau" in t.columns else None for t in tables]
    if at[0] is not None and at[1] is not None and at[0] != at[1]:
        raise Unreadable(f"{names[0]} is at tau {sorted(at[0])}, {names[1]} at {sorted(at[1])}: verdicts at different "
                         f"tau are not comparable")


def main(first: str, second: str, rule: str = "seeds") -> int:
    tables = [checked(read_verdicts(s), s, rule) for s in (first, second)]
    taus(tables, (first, second))
    lines, ok = render(*tables, rule, (first, second))
    print("\n".join(lines))
    return 0 if ok else 1
