"""Progress a person can see, for every long job (training, the admission checks, the KV attribution, the
throughput and memory-bound measurements, the probes): a tqdm bar on stderr when stderr is a terminal;
otherwise (a Snakemake `log:` file, a Slurm output file) one line at every tenth of the job. Every job ends
with one summary line of what it produced (`done`, `training_summary`), on stderr with its progress.
"""
from __future__ import annotations

import math
import sys
import time
from pathlib import Path


def milestones(total: int, parts: int = 10) -> list[int]:
    """The counts at which a job without a terminal prints a progress line: the first count at or past
    each `1/parts` of `total` (each once; the last, `total`, always)."""
    if total <= 0:
        return []
    return sorted({math.ceil(total * i / parts) for i in range(1, parts + 1)})


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def fields_text(fields: dict) -> str:
    """`k=v` pairs, floats to 4 significant digits."""
    return " ".join(f"{k}={_fmt(v)}" for k, v in fields.items())


def duration(seconds: float) -> str:
    """A wall time as a person reads it: 8.3 s, 4 min 12 s, 2 h 05 min."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"


class Progress:
    """Progress of one job over `total` units: `update()` after each (or `update(n)` with the count done so
    far, as a training run reports it; `initial`: the count already done, as a resumed run starts). A tqdm
    bar on a terminal, else a line at each milestone: `<label>: <unit> n/total (p%), <elapsed> k=v ...`."""

    def __init__(self, label: str, total: int, unit: str = "step", stream=None, initial: int = 0):
        from tqdm import tqdm
        self.label, self.total, self.unit = label, int(total), unit
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.n, self.t0 = int(initial), time.perf_counter()
        self.marks = milestones(self.total)
        self.bar = tqdm(total=self.total, initial=self.n, desc=label, unit=unit, file=self.stream, leave=False,
                        disable=not self.tty)

    def update(self, n: int | None = None, **fields) -> None:
        n = self.n + 1 if n is None else int(n)
        prev, self.n = self.n, n
        if self.tty:
            self.bar.update(n - prev)
            if fields:
                self.bar.set_postfix_str(fields_text(fields), refresh=False)
        elif any(prev < m <= n for m in self.marks):
            extra = f" {fields_text(fields)}" if fields else ""
            print(f"{self.label}: {self.unit} {n}/{self.total} ({100 * n / max(1, self.total):.0f}%), "
                  f"{duration(time.perf_counter() - self.t0)}{extra}", file=self.stream, flush=True)
        if n >= self.total:
            self.close()

    def close(self) -> None:
        self.bar.close()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def steps_callback(label: str, stream=None):
    """The `progress(n, total, row)` callback the tiny trainer calls after each step: a `Progress` made at
    the first call (the trainer knows the total; a resumed run starts past 0), showing d_n and the loss."""
    state: dict = {}

    def report(n: int, total: int, row: dict) -> None:
        if "p" not in state:
            state["p"] = Progress(label, total, "step", stream, initial=n - 1)
        state["p"].update(n, d_n=float(row["d_n"]), loss=float(row["loss"]))
    return report


def table_rows(path) -> int | None:
    """Rows of a Parquet file (from its footer, without reading the data); None for other files."""
    if Path(path).suffix != ".parquet":
        return None
    import pyarrow.parquet as pq
    return pq.ParquetFile(path).metadata.num_rows


def produced(paths) -> str:
    """What a job wrote, as its summary line says it: `path (N rows)`, comma-separated."""
    parts = []
    for p in paths:
        rows = table_rows(p)
        parts.append(f"{p} ({rows} rows)" if rows is not None else str(p))
    return ", ".join(parts)


def done(label: str, paths, t0: float, stream=None, **fields) -> str:
    """A job's one-line summary: what it wrote (with row counts), any `fields`, and its wall time since
    `t0` (a time.perf_counter()). Printed on stderr (or `stream`) and returned."""
    paths = list(paths)
    what = f"wrote {produced(paths)}" if paths else "wrote nothing"
    extra = f", {fields_text(fields)}" if fields else ""
    line = f"{label}: done: {what}{extra}; wall time {duration(time.perf_counter() - t0)}"
    print(line, file=stream if stream is not None else sys.stderr, flush=True)
    return line


def training_summary(run_id: str, steps: int, final_kl: float | None, final_step: int | None, wall_s: float) -> str:
    """A training run's one-line summary: run id, steps, final held-out KL (and its step), wall time."""
    kl = "no held-out evaluation" if final_kl is None else f"final held-out KL {final_kl:.4g} (step {final_step})"
    return f"{run_id}: done: {steps} steps, {kl}; wall time {duration(wall_s)}"
