"""Atomic writes (temporary name, then rename) and reads that check columns and dtypes: the Parquet contract of
the run files (STEPS, HELDOUT) and the derived tables. A write that finds the disk full raises DiskFull naming the
file and its filesystem, and leaves nothing behind."""
from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from opd.guard import ROW_ENGINE


_ID = {"run_id": pa.string(), "config": pa.string(), "student": pa.string(), "seed": pa.int64(), "step": pa.int64()}
STEPS = pa.schema({**_ID, "d_n": pa.float64(), "seq_logratio_p90": pa.float64(), "n_tokens": pa.int64(),
                   "trained_tokens": pa.int64(), "step_s": pa.float64(), "rollout_s": pa.float64(),
                   "teacher_s": pa.float64(), "train_s": pa.float64(), "weight_sync_s": pa.float64(),
                   "wait_s": pa.float64(), "staleness": pa.int64(), "policy_version": pa.int64(),
                   "engine_version": pa.int64(), "loss": pa.float64(), "grad_norm": pa.float64(),
                   "entropy": pa.float64(), "response_len_mean": pa.float64(), "reward_mean": pa.float64(),
                   "engine": pa.string(), "guard_active": pa.bool_(), "rejected_d_n": pa.float64()}.items())
HELDOUT = pa.schema({**_ID, "prompt_id": pa.int64(), "kl": pa.float64(), "kl_sampled": pa.float64(),
                     "n_tokens": pa.int64(), "correct": pa.float64()}.items())
SCHEMAS = {"steps.parquet": STEPS, "heldout.parquet": HELDOUT}
# Columns added to the contract after runs were committed, with the value a file written before them
# reads back with (the mismatch guard's: which engine rolled the step out, ROW_ENGINE or the guard's action,
# whether the guard was active, and the d_n of the row engine's batch a guard that rejects discarded on that step,
# NaN where none was). Writers write them.
ADDED = {"engine": ROW_ENGINE, "guard_active": False, "rejected_d_n": float("nan")}
# Columns a writer may add and a reader checks when present (runs written before the column existed, or by
# a backend that does not measure it, lack it): heldout's `entropy` is the mean per-token entropy of the
# policy on its own held-out responses (the tiny backend; the RL collapse rule reads it).
OPTIONAL = {"heldout.parquet": pa.schema({"entropy": pa.float64()}.items())}
# Columns the contract says hold a number on every row (every reader averages them: a NaN skipped by a mean
# would move a verdict without a word): a NaN, an infinity or a null there is refused, naming file and column.
FINITE = {"steps.parquet": ("d_n", "n_tokens", "trained_tokens"), "heldout.parquet": ("kl", "n_tokens")}


def _optional(schema: pa.Schema, path: Path) -> list[pa.Field]:
    """The optional columns of a file written or read with `schema` (a known file's schema, under any name)."""
    return [f for n in _names(schema, path) for f in OPTIONAL.get(n, ())]


class SchemaError(ValueError):
    pass


class DamagedFile(SchemaError):
    """A file that exists but is not what its writer wrote (truncated, overwritten, not Parquet)."""


class DiskFull(OSError):
    """A write that found no space (or quota) left; the message names the file and its filesystem."""


def _no_space(e: BaseException) -> bool:
    """Whether a write failed for lack of space: OSError's errno, or the message of libraries that wrap it
    (pyarrow's OSError carries no errno; torch raises RuntimeError)."""
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return isinstance(e, (OSError, RuntimeError)) and any(
        m in str(e) for m in ("No space left on device", "Disk quota exceeded"))


def mount_point(path) -> Path:
    """The mount point of the filesystem holding `path` (or its nearest existing parent)."""
    p = Path(os.path.abspath(path))
    while not p.exists():
        p = p.parent
    while not os.path.ismount(p):
        p = p.parent
    return p


def disk_full_error(path, e: BaseException) -> DiskFull:
    where = mount_point(Path(path).parent)
    try:
        usage = shutil.disk_usage(where)
        space = f"{usage.free / 2**20:.1f} MiB free of {usage.total / 2**20:.1f} MiB"
    except OSError:
        space = "free space unknown"
    return DiskFull(errno.ENOSPC, f"disk full: no space left on the filesystem mounted at {where} ({space}) "
                    f"while writing {path}; nothing was written there. Free space on {where}, then rerun: a "
                    f"training run continues from its last checkpoint ({type(e).__name__}: {e})")


def _umask() -> int:
    """The process's umask (read from /proc where it is, without the set-and-restore race of os.umask)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write(path: Path, write) -> None:
    """Write `path` through write(tmp) to a temporary name in its folder, then rename it into place; on
    any failure the temporary file is removed, and a full disk raises DiskFull. The file gets the mode `open`
    would give it (0666 less the umask), not mkstemp's 0600: collaborators sharing the results can read them."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        if _no_space(e):
            raise disk_full_error(path, e) from e
        raise
    try:
        os.fchmod(fd, 0o666 & ~_umask())
    finally:
        os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if _no_space(e):
            raise disk_full_error(path, e) from e
        raise


# How every table is written (the results are committed, so their size is the repository's): zstd at a high level,
# floating-point columns byte-stream split (Parquet's encoding for floats: each value's bytes regrouped by position,
# so the exponents compress) and not dictionary-encoded, no column statistics (the files are small and never read
# with filters; the statistics of a random-looking float column cost about as much as its values compress). A run's
# files come out about 30% smaller than with zstd's defaults; lossless, and any Parquet reader of format 2.8 or later
# (pyarrow, DuckDB, Polars, Spark 3.4+) reads them. Measured: benchmarks/parquet_size.py.
COMPRESSION = "zstd"
COMPRESSION_LEVEL = 19


def parquet_options(table: pa.Table) -> dict:
    """pyarrow.parquet.write_table's keyword arguments for `table` (see COMPRESSION above)."""
    floats = [f.name for f in table.schema if pa.types.is_floating(f.type)]
    return {"compression": COMPRESSION, "compression_level": COMPRESSION_LEVEL, "write_statistics": False,
            "use_byte_stream_split": floats or False,
            "use_dictionary": [f.name for f in table.schema if f.name not in floats]}


INPUTS_KEY = b"opd.inputs"  # a derived table's record of what it was computed from (opd.dag.analysis_inputs)


def write_table(df: pd.DataFrame, path, schema: pa.Schema | None = None, inputs: dict | None = None) -> None:
    """Write a DataFrame as Parquet atomically; with a schema, select its columns and cast to its types
    (an absent or uncastable column raises SchemaError naming the file); with `inputs`, that record in the file's
    metadata (read_inputs)."""
    if schema is not None:
        missing = [f.name for f in schema if f.name not in df.columns]
        if missing:
            raise SchemaError(f"{path}: missing columns {missing}")
        extra = [f for f in _optional(schema, Path(path)) if f.name in df.columns]
        schema = pa.schema(list(schema) + extra)
        table = pa.Table.from_pandas(df[schema.names], preserve_index=False).cast(schema)
    else:
        table = pa.Table.from_pandas(df, preserve_index=False)
    if inputs is not None:
        table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                               INPUTS_KEY: json.dumps(inputs, sort_keys=True).encode()})
    atomic_write(path, lambda tmp: pq.write_table(table, tmp, **parquet_options(table)))


def rewrite_table(path) -> tuple[int, int]:
    """Write the Parquet file at `path` again with the store's options (parquet_options), atomically and only once
    the new bytes read back equal to the old table, schema metadata included (lossless); returns its sizes before
    and after. Tables written by older code become as small as new ones (`python -m opd.cli check-runs
    --rewrite-tables`)."""
    path = Path(path)
    before = path.stat().st_size
    table = pq.read_table(path)

    def write(tmp):
        pq.write_table(table, tmp, **parquet_options(table))
        if not pq.read_table(tmp).equals(table, check_metadata=True):
            raise DamagedFile(f"{path}: rewritten, it does not read back equal; left as it was")
    atomic_write(path, write)
    return before, path.stat().st_size


def read_inputs(path) -> dict | None:
    """The record of what a derived table was computed from (write_table's `inputs`), or None: no record, no file,
    or a file that is not readable Parquet."""
    try:
        meta = pq.read_schema(path).metadata or {}
        return json.loads(meta[INPUTS_KEY]) if INPUTS_KEY in meta else None
    except (OSError, ValueError, pa.ArrowException):
        return None


def _same_type(have: pa.DataType | None, want: pa.DataType) -> bool:
    """Equal types; any of Arrow's string encodings counts as a string."""
    if have is None:
        return False
    strings = (pa.types.is_string, pa.types.is_large_string, pa.types.is_string_view)
    return have == want or (any(f(have) for f in strings) and any(f(want) for f in strings))


def read_table(path, schema: pa.Schema | None = None) -> pd.DataFrame:
    """Read Parquet; with a schema (or for a known file name), check every column and dtype."""
    path = Path(path)
    schema = schema or SCHEMAS.get(path.name)
    try:
        table = pq.read_table(path)
    except FileNotFoundError:
        raise
    except (pa.ArrowException, OSError) as e:
        raise DamagedFile(f"{path}: not a readable Parquet file ({e}). If it is a run's file or a measurement, "
                          f"rerun the pipeline (`snakemake -c 2`, or your usual command): it checks every run against "
                          f"its run.json and every measurement file whose size or time changed, and reruns what is "
                          f"damaged (a run's files are quarantined in results/<experiment>/_quarantine/). A file "
                          f"damaged in place with its time kept is found by `python -m opd.cli check-runs --hash`, "
                          f"which quarantines the run; the next `snakemake` reruns it.") from e
    if schema is not None:
        for f in schema:
            if f.name in ADDED and f.name not in table.column_names:
                table = table.append_column(f, pa.array([ADDED[f.name]] * table.num_rows, f.type))
        have = {f.name: f.type for f in table.schema}
        optional = [f for f in _optional(schema, path) if f.name in have]
        problems = [f"{f.name} missing" if f.name not in have else f"{f.name} is {have[f.name]}, expected {f.type}"
                    for f in list(schema) + optional if not _same_type(have.get(f.name), f.type)]
        if problems:
            raise SchemaError(f"{path}: " + "; ".join(problems))
        problems = [_not_finite(table[c], c) for n in _names(schema, path) for c in FINITE.get(n, ())]
        if any(problems):
            raise SchemaError(f"{path}: " + "; ".join(p for p in problems if p)
                              + " (the contract says a number on every row)")
    return table.to_pandas()


def _names(schema: pa.Schema, path: Path) -> list[str]:
    """The known file names whose contract `schema` is (the file's own name for an unknown schema)."""
    return [n for n, s in SCHEMAS.items() if s.equals(schema)] or [path.name]


def _not_finite(col: pa.ChunkedArray, name: str) -> str | None:
    """'column 'kl': 5 NaN values (first at row 17)' for a column with NaN, infinities or nulls, or None."""
    import pyarrow.compute as pc
    bad = pc.is_null(col) if not pa.types.is_floating(col.type) else pc.invert(pc.is_finite(col.fill_null(float("nan"))))
    n = pc.sum(bad).as_py() or 0
    if not n:
        return None
    first = pc.index(bad, True).as_py()
    return f"column {name!r}: {n} NaN, infinite or missing value{'s' if n > 1 else ''} (first at row {first})"


def write_json(obj, path) -> None:
    def w(tmp):
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=1, sort_keys=True, default=str)
            f.write("\n")
    atomic_write(path, w)


def read_json(path) -> dict:
    with open(path) as f:
        return json.load(f)


def atomic_torch_save(obj, path) -> None:
    import io

    import torch
    buf = io.BytesIO()  # serialized in memory, so that a full disk is Python's OSError (ENOSPC), not torch's
    torch.save(obj, buf)

    def w(tmp):
        with open(tmp, "wb") as f:
            f.write(buf.getbuffer())
            f.flush()
            os.fsync(f.fileno())
    atomic_write(path, w)
