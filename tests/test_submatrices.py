"""Every output holds for any matrix a user would write: sub-matrices of the toy (a few rows, a non-first student
alone, RL rows only, no probed runs, one seed), built for real with `snakemake -c 2` in a fresh clone, render every
output their experiment selects (opd/outputs.py) and leave the others out of the DAG, never a traceback (the toy
experiment selected in the clone: conftest.toy_dry_run). They
reuse the committed runs and measurements (their specs are unchanged: students and seeds are placement fields,
and the rows whose changes would move a measurement's spec come in groups), so nothing trains."""
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import TRAIN_RULES, copy_clone, edit_config, jobs_in, planned, planned_rules, snakemake
from opd import outputs as O

COMPUTE = TRAIN_RULES | {"base_models", "admission", "kv_attribution_student", "throughput", "memory_bound"}
TOY = yaml.safe_load(open(O.__file__.replace("opd/outputs.py", "config.yaml")))["experiments"]["toy"]
ROWS = {r["name"]: r for r in TOY["rows"]}
PRIMARY = next(iter(TOY["students"]))
# rows whose presence moves a measurement's spec go together: the KV-cache recipes (the KV attribution's cases) and
# the staleness values (the throughput measurement's k)
GROUPS = {"kv-e4m3": ("kv-e4m3", "kv-e5m2"), "kv-e5m2": ("kv-e4m3", "kv-e5m2"),
          **{f"stale-k{k}": ("stale-k1", "stale-k2", "stale-k4", "stale-k8") for k in (1, 2, 4, 8)}}
POOL = ["fp8w", "nvfp4", "noise-15", "noise-234", "kv-e4m3", "kv-e5m2", "stale-k2", "stale-k4-guard",
        "noise-234-center", "rl-reinforce-bf16", "rl-grpo-nvfp4"]


def students_of(name: str) -> list[str]:
    return ROWS[name].get("students", [PRIMARY])


def submatrix(names, student=None, one_seed=False) -> list[dict]:
    """The toy's baseline and rows `names` (with their groups), each on `student` alone where given (rows that do
    not run it are dropped), with the first seed only where `one_seed`."""
    chosen = ["bf16"]
    for n in names:
        for m in GROUPS.get(n, (n,)):
            if m not in chosen:
                chosen.append(m)
    if any(ROWS[n].get("staleness") for n in chosen):  # a stale row's k joins the throughput's: all of them
        chosen += [m for m in GROUPS["stale-k1"] if m not in chosen]
    rows = []
    for n in chosen:
        r = dict(ROWS[n])
        if student:
            if student not in students_of(n):
                continue
            r["students"] = [student]
        if one_seed:
            r["seeds"] = [0]  # the first seed: a probed run stays the one its committed spec probes
        elif r.get("seeds") == "sequential":
            r["seeds"] = [0, 1, 2]  # a fixed design: the first seeds, one per base-model draw, which every such row ran
        rows.append(r)
    return rows


def build(fresh, tmp_path, rows) -> tuple:
    clone = copy_clone(fresh, tmp_path / "clone")  # a fresh clone selecting the toy (conftest.toy_dry_run's, copied)
    # a fixed design: the rows given, without the toy's bisected edges (test_plan.py checks those)
    edit_config(clone, lambda c: (c.update(experiment="toy"), c["experiments"]["toy"].update(rows=rows),
                                  c["experiments"]["toy"].pop("edges"), c["experiments"]["toy"].pop("sequential")))
    experiment = yaml.safe_load((clone / "config.yaml").read_text())["experiments"]["toy"]
    assert not planned_rules(planned(clone)) & COMPUTE  # nothing trains or measures
    r = snakemake(clone, "-c", "2", check=False)
    out = r.stdout + r.stderr
    assert r.returncode == 0 and "Traceback" not in out, out[-6000:]
    selected = {o.rule for o in O.selected(experiment)}
    ran = planned_rules(jobs_in(r))  # the jobs its Snakemake log lists (the terminal leaves them out)
    for o in O.OUTPUTS:
        folder = clone / "figures" / "toy" / ("" if o.kind == "figure" else "tables")
        made = o.rule in ran
        if o.rule in selected:
            assert made and all((folder / f"{o.name}.{ext}").exists() for ext in o.extensions), o.rule
        else:
            assert not made, f"{o.rule} ran for an experiment that does not select it"
    assert (clone / "figures" / "toy" / "findings.md").exists()
    return clone, out


@pytest.mark.parametrize("rows", [
    # every row on one non-first student (the matrix, on runs the toy has): figure_mismatch_steps once
    # drew zero panels for the primary student's absent runs
    pytest.param(submatrix(["fp8w"], student="llama-s"), id="llama-s-alone"),
    # the baseline and an RL row: the mechanism's table once read the noise rows' columns from none
    pytest.param(submatrix(["rl-reinforce-bf16"]), id="bf16-and-rl"),
])
def test_the_sub_matrices_that_crashed(toy_dry_run, tmp_path, rows):
    build(toy_dry_run[0], tmp_path, rows)


@settings(max_examples=2, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(names=st.lists(st.sampled_from(POOL), min_size=0, max_size=3, unique=True),
       student=st.sampled_from([None, "qwen-m", "llama-s"]), one_seed=st.booleans())
def test_any_sub_matrix_renders_or_leaves_out_every_output(toy_dry_run, tmp_path_factory, names, student, one_seed):
    build(toy_dry_run[0], tmp_path_factory.mktemp("sub"), submatrix(names, student, one_seed))
