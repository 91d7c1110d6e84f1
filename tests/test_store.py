"""The run store: atomic writes, checked reads, and what counts as complete."""
import pandas as pd
import pyarrow as pa
import pytest

from opd import store


def steps_frame(n=3):
    cols = {f.name: ([0.5] * n if pa.types.is_floating(f.type) else [1] * n) for f in store.STEPS}
    cols.update(run_id=["r"] * n, config=["c"] * n, student=["s"] * n, step=list(range(n)))
    return pd.DataFrame(cols)


def test_round_trip_and_no_temporary_files_left(tmp_path):
    store.write_table(steps_frame(), tmp_path / "steps.parquet", store.STEPS)
    assert store.read_table(tmp_path / "steps.parquet")["step"].tolist() == [0, 1, 2]
    assert [p.name for p in tmp_path.iterdir()] == ["steps.parquet"]


def test_reader_names_the_file_and_the_bad_columns(tmp_path):
    bad = steps_frame().drop(columns=["d_n"]).assign(n_tokens=["x", "y", "z"])
    path = tmp_path / "steps.parquet"
    store.write_table(bad, path)  # written without the contract
    with pytest.raises(store.SchemaError) as e:
        store.read_table(path)
    assert str(path) in str(e.value) and "d_n missing" in str(e.value) and "n_tokens is large_string, expected int64" in str(e.value)


def test_writer_refuses_a_frame_missing_contract_columns(tmp_path):
    with pytest.raises(store.SchemaError, match="missing columns \\['d_n'\\]"):
        store.write_table(steps_frame().drop(columns=["d_n"]), tmp_path / "steps.parquet", store.STEPS)
    assert not list(tmp_path.iterdir())


def test_a_failed_write_leaves_nothing_behind(tmp_path):
    def boom(tmp):
        open(tmp, "w").write("half")
        raise RuntimeError("killed")
    with pytest.raises(RuntimeError):
        store.atomic_write(tmp_path / "x.json", boom)
    assert not list(tmp_path.iterdir())


def test_run_is_complete_only_when_run_json_says_so(tmp_path):
    assert not store.is_complete(tmp_path)
    store.write_json({"status": "running"}, tmp_path / "run.json")
    assert not store.is_complete(tmp_path)
    store.write_json({"status": "complete"}, tmp_path / "run.json")
    assert store.is_complete(tmp_path)
