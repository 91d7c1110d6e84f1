"""Progress a person can see (opd.progress): a job run without a terminal prints a line at every tenth of
its work and ends with a one-line summary of what it produced, on stderr."""
import re

import numpy as np
import pytest

from opd import progress, store, training
from opd.backends.tiny.offline import kv_attribution_job, memory_bound_job
from opd.backends.tiny.sft import train_base

STUDENT = {"family": "qwen2", "layers": 2, "heads": 2, "kv_heads": 1, "head_dim": 32, "d_ff": 64, "sft_lr": 3e-3,
           "sft_batch": 32, "student_steps": 20, "teacher_steps": 40, "seed": 0}


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    out = tmp_path_factory.mktemp("base")
    train_base(STUDENT, task_seed=0, seed=0, out_dir=out)
    return out


def test_milestones_are_every_tenth_and_the_last():
    assert progress.milestones(100) == list(range(10, 101, 10))
    assert progress.milestones(20) == list(range(2, 21, 2))
    assert progress.milestones(5) == [1, 2, 3, 4, 5]
    assert progress.milestones(7)[-1] == 7 and progress.milestones(0) == []


def test_progress_lines_without_a_terminal_resume_past_zero(capsys):
    p = progress.Progress("job", 40, "step", initial=12)  # pytest's capture: stderr is not a terminal
    for n in range(13, 41):  # a run resumed after step 12
        p.update(n, loss=0.5)
    lines = capsys.readouterr().err.splitlines()
    assert [int(re.match(r"job: step (\d+)/40 ", ln).group(1)) for ln in lines] == [16, 20, 24, 28, 32, 36, 40]
    assert all("loss=0.5" in ln for ln in lines)


def test_training_without_a_terminal_prints_progress_and_its_summary(base, tmp_path, capsys):
    spec = {"run_id": "r.s.s0", "experiment": "t", "backend": "tiny", "row": {"name": "r"}, "student": "s",
            "seed": 0, "student_path": str(base / "student.pt"), "teacher_path": str(base / "teacher.pt"),
            "settings": {"steps": 20, "prompts_per_step": 4, "responses_per_prompt": 2, "eval_every": 10,
                         "eval_responses": 1, "checkpoint_every": 100}}
    meta = training.train(spec, tmp_path / "run")
    err = capsys.readouterr().err.splitlines()
    steps = [int(m.group(1)) for m in (re.match(r"r\.s\.s0: step (\d+)/20 \(\d+%\), .* d_n=\S+ loss=\S+$", ln)
                                       for ln in err) if m]
    assert steps == list(range(2, 21, 2)), err
    held = store.read_table(tmp_path / "run" / "heldout.parquet")
    kl = held.loc[held["step"] == 20, "kl"].mean()
    summary = err[-1]
    assert summary.startswith(f"r.s.s0: done: 20 steps, final held-out KL {kl:.4g} (step 20); wall time "), err
    assert float(re.search(r"wall time ([\d.]+) s", summary).group(1)) == pytest.approx(meta["wall_s"], abs=0.06)


OFFLINE = {"experiment": "t", "backend": "tiny", "task_seed": 0, "student": "s", "teacher_path": None}  # a spec file's


def test_measurement_without_a_terminal_prints_progress_and_what_it_wrote(base, tmp_path, capsys):
    out = tmp_path / "memory_bound.parquet"
    memory_bound_job({**OFFLINE, "student_path": str(base / "student.pt"), "kv_budget_sequences": 4,
                      "batches": [4, 8], "repeats": 1}, out)
    err = capsys.readouterr().err.splitlines()
    cases = [int(m.group(1)) for m in (re.match(r"memory-bound: case (\d)/6 ", ln) for ln in err) if m]
    assert cases == [1, 2, 3, 4, 5, 6], err
    assert re.fullmatch(rf"memory-bound: done: wrote {re.escape(str(out))} \(6 rows\); wall time [\d.]+ s", err[-1]), err
    assert len(store.read_table(out)) == 6


def test_kv_attribution_without_a_terminal_prints_every_case_and_what_it_wrote(base, tmp_path, capsys):
    out = tmp_path / "kv.parquet"
    kv_attribution_job({**OFFLINE, "student_path": str(base / "student.pt"), "seed": 0,
                        "prompts": 4, "responses": 2, "recipes": ["fp8_e4m3"]}, out)
    err = capsys.readouterr().err.splitlines()
    done = [re.match(r"kv-attribution s: case (\d+)/(\d+) .*recipe=fp8_e4m3", ln) for ln in err]
    total = int(next(m for m in done if m).group(2))
    assert [int(m.group(1)) for m in done if m] == progress.milestones(total), err
    rows = len(store.read_table(out))
    assert rows == total * 4 * 2  # one row per case and sequence
    assert re.fullmatch(rf"kv-attribution s: done: wrote {re.escape(str(out))} \({rows} rows\); wall time [\d.]+ s",
                        err[-1]), err


def test_summary_counts_the_rows_it_wrote(tmp_path, capsys):
    import pandas as pd
    path = tmp_path / "t.parquet"
    store.write_table(pd.DataFrame({"a": np.arange(7)}), path)
    line = progress.done("job", [path, tmp_path / "x.json"], t0=0.0, n=3)
    assert capsys.readouterr().err.strip() == line
    assert line.startswith(f"job: done: wrote {path} (7 rows), {tmp_path / 'x.json'}, n=3; wall time ")
