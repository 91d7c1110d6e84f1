"""`python -m opd.cli export`: the committed runs' curves written as TensorBoard events and W&B offline runs,
read back with each tool's own reader (TensorBoard's EventAccumulator; the W&B run file's records)."""
import json
import struct
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from conftest import ROOT, TOY

RUN = "fp8w.qwen-s.s1"  # a committed run of the toy experiment (not the default one): every export names it


def export(*args):
    r = subprocess.run([sys.executable, "-m", "opd.cli", "export", "--experiment", TOY, *args], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r


def expected():
    steps = pd.read_parquet(ROOT / f"results/{TOY}/runs/{RUN}/steps.parquet")
    held = pd.read_parquet(ROOT / f"results/{TOY}/runs/{RUN}/heldout.parquet")
    return steps, held, held.groupby("step")["kl"].mean(), held.groupby("step")["correct"].mean()


def test_tensorboard_events_read_back(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    export("--tensorboard", str(tmp_path), "--run", RUN)
    acc = EventAccumulator(str(tmp_path / RUN))
    acc.Reload()
    steps, held, kl, accuracy = expected()
    d_n = acc.Scalars("train/d_n")
    assert [e.step for e in d_n] == steps["step"].tolist()
    np.testing.assert_allclose([e.value for e in d_n], steps["d_n"], rtol=1e-6)  # TensorBoard stores float32
    np.testing.assert_allclose([e.value for e in acc.Scalars("train/loss")], steps["loss"], rtol=1e-6)
    h = acc.Scalars("heldout/kl")
    assert [e.step for e in h] == kl.index.tolist()
    np.testing.assert_allclose([e.value for e in h], kl, rtol=1e-6)
    np.testing.assert_allclose([e.value for e in acc.Scalars("heldout/accuracy")], accuracy, rtol=1e-6)
    assert all(b.wall_time >= a.wall_time for a, b in zip(d_n, d_n[1:]))  # the run's own clock
    # a second export writes the same events (wall times are the run's, not the export's)
    export("--tensorboard", str(tmp_path / "again"), "--run", RUN)
    again = EventAccumulator(str(tmp_path / "again" / RUN))
    again.Reload()
    assert [(e.wall_time, e.value) for e in again.Scalars("train/d_n")] == [(e.wall_time, e.value) for e in d_n]


def wandb_records(path):
    """The records of a W&B run file (a LevelDB-style log: 32 KiB blocks of [crc32 4][length 2][type 1] chunks
    after a 7-byte header), parsed with W&B's own protobuf message."""
    from wandb.proto import wandb_internal_pb2 as pb
    data, block, pos, parts, out = path.read_bytes(), 32768, 7, b"", []
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        if block - pos % block < 7:
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == 0:
            continue
        parts = chunk if kind in (1, 2) else parts + chunk
        if kind in (1, 4):
            rec = pb.Record()
            rec.ParseFromString(parts)
            out.append(rec)
    return out


def test_wandb_offline_run_reads_back(tmp_path):
    pytest.importorskip("wandb")
    r = export("--wandb", str(tmp_path), "--run", RUN)
    assert "W&B offline runs in" in r.stdout
    files = list((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 1
    recs = wandb_records(files[0])
    run = next(x.run for x in recs if x.WhichOneof("record_type") == "run")
    assert run.display_name == RUN and run.run_group == "fp8w" and run.project == "opd-budget-toy"
    config = {i.key: json.loads(i.value_json) for i in run.config.update}
    assert config["student"] == "qwen-s" and config["seed"] == 1 and config["row"]["weights"] == "fp8_tensor"
    history = {}
    for x in recs:
        if x.WhichOneof("record_type") == "history":
            items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in x.history.item}
            history[int(items["_step"])] = items
    steps, held, kl, accuracy = expected()
    assert sorted(history) == sorted(set(steps["step"]) | set(kl.index))
    assert [history[s]["train/d_n"] for s in steps["step"]] == steps["d_n"].tolist()  # exact: JSON floats
    assert [history[s]["heldout/kl"] for s in kl.index] == kl.tolist()
    assert [history[s]["heldout/accuracy"] for s in kl.index] == accuracy.tolist()


def test_export_selects_a_row_and_refuses_what_is_not_there(tmp_path):
    pytest.importorskip("tensorboard")
    export("--tensorboard", str(tmp_path), "--row", "fp8w", "--student", "qwen-s")
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"fp8w.qwen-s.s{i}" for i in range(3)]
    r = subprocess.run([sys.executable, "-m", "opd.cli", "export", "--experiment", TOY, "--tensorboard", str(tmp_path),
                        "--run", "fp8w.x.s0"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 2 and "has no run 'fp8w.x.s0'" in r.stderr
    r = subprocess.run([sys.executable, "-m", "opd.cli", "export", "--experiment", TOY, "--row", "fp8w"], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 2 and "give --tensorboard DIR, --wandb DIR, or both" in r.stderr
