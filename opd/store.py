"""The run store: atomic writes (temporary name, then rename) and reads that check columns and dtypes.

A run folder is complete when its run.json says `"status": "complete"`; every file in it is renamed
into place only once fully written, so a killed job never leaves a file that looks finished.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

_ID = {"run_id": pa.string(), "config": pa.string(), "student": pa.string(), "seed": pa.int64(), "step": pa.int64()}
STEPS = pa.schema({**_ID, "d_n": pa.float64(), "seq_logratio_p90": pa.float64(), "n_tokens": pa.int64(),
                   "trained_tokens": pa.int64(), "step_s": pa.float64(), "rollout_s": pa.float64(),
                   "teacher_s": pa.float64(), "train_s": pa.float64(), "weight_sync_s": pa.float64(),
                   "wait_s": pa.float64(), "staleness": pa.int64(), "policy_version": pa.int64(),
                   "engine_version": pa.int64(), "loss": pa.float64(), "grad_norm": pa.float64(),
                   "entropy": pa.float64(), "response_len_mean": pa.float64(), "reward_mean": pa.float64()}.items())
HELDOUT = pa.schema({**_ID, "prompt_id": pa.int64(), "kl": pa.float64(), "kl_sampled": pa.float64(),
                     "n_tokens": pa.int64(), "correct": pa.float64()}.items())
SCHEMAS = {"steps.parquet": STEPS, "heldout.parquet": HELDOUT}


class SchemaError(ValueError):
    pass


def atomic_write(path: Path, write) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_table(df: pd.DataFrame, path, schema: pa.Schema | None = None) -> None:
    """Write a DataFrame as Parquet atomically; with a schema, select its columns and cast to its types
    (an absent or uncastable column raises SchemaError naming the file)."""
    if schema is not None:
        missing = [f.name for f in schema if f.name not in df.columns]
        if missing:
            raise SchemaError(f"{path}: missing columns {missing}")
        table = pa.Table.from_pandas(df[schema.names], preserve_index=False).cast(schema)
    else:
        table = pa.Table.from_pandas(df, preserve_index=False)
    atomic_write(path, lambda tmp: pq.write_table(table, tmp))


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
    table = pq.read_table(path)
    if schema is not None:
        have = {f.name: f.type for f in table.schema}
        problems = [f"{f.name} missing" if f.name not in have else f"{f.name} is {have[f.name]}, expected {f.type}"
                    for f in schema if not _same_type(have.get(f.name), f.type)]
        if problems:
            raise SchemaError(f"{path}: " + "; ".join(problems))
    return table.to_pandas()


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
    import torch
    atomic_write(path, lambda tmp: torch.save(obj, tmp))


def is_complete(run_dir) -> bool:
    p = Path(run_dir) / "run.json"
    return p.exists() and read_json(p).get("status") == "complete"
