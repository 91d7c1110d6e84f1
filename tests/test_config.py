"""Bad input gets a clear error naming the experiment, row and field, before any job starts."""
import copy

import pytest
import yaml

from opd import config as C
from opd import outputs as O
from opd import stats
from opd.rows import Row
from opd.spec import Experiment


def err(cfg) -> str:
    with pytest.raises(C.ConfigError) as e:
        C.validate(cfg)
    return str(e.value)


def rows(cfg):
    return cfg["experiments"]["toy"]["rows"]


def row(cfg, name):
    """(number, row) of the toy row with this name, counted from 1 as errors name rows."""
    return next((i, r) for i, r in enumerate(rows(cfg), 1) if r["name"] == name)


def test_the_shipped_config_is_valid(toy_config):
    C.validate(toy_config)
    C.validate(yaml.safe_load((C.ROOT / "config.yaml").read_text()))  # as shipped: its default experiment selected


def test_unknown_key_names_row_and_field(toy_config):
    i, r = row(toy_config, "fp8w-l0")
    r["nosie_sigma"] = 0.1
    m = err(toy_config)
    assert f"experiment 'toy', row {i} ('fp8w-l0')" in m and "unknown key" in m and "nosie_sigma" in m


def test_a_misspelt_key_or_value_gets_the_closest_names(toy_config):
    i, r = row(toy_config, "fp8w-l0")
    r["bf16_layer"] = r.pop("bf16_layers")
    assert "unknown key: 'bf16_layer'; did you mean 'bf16_layers'?" in err(toy_config)
    r["bf16_layers"] = r.pop("bf16_layer")
    r["weights"] = "nvpf4"
    assert f"row {i} ('fp8w-l0'), field 'weights'" in err(toy_config) and "did you mean 'nvfp4'" in err(toy_config)


def test_an_error_names_the_line_its_row_starts_on_in_the_file_that_set_it(tmp_path, toy_config, monkeypatch):
    monkeypatch.chdir(C.ROOT)  # a file below the working directory is named relative to it
    src = (C.ROOT / "config.yaml").read_text()
    i, r = row(toy_config, "nvfp4")
    r["staleness"] = -2
    line = 1 + next(n for n, t in enumerate(src.splitlines()) if "{name: nvfp4," in t)
    assert f"row {i} ('nvfp4', config.yaml line {line}), field 'staleness'" in err_at(toy_config, [C.ROOT / "config.yaml"])
    # a --configfile that sets the rows again: its own line wins
    override = tmp_path / "mine.yaml"
    override.write_text("# my rows\n\nexperiments:\n  toy:\n    rows:\n" + "".join(
        f"      - {{name: {x['name']}}}\n" for x in rows(toy_config)))
    at = C.Lines([C.ROOT / "config.yaml", override])
    assert at("experiments", "toy", "rows", i - 1) == f"{override} line {5 + i}"  # outside it: in full


def err_at(cfg, sources) -> str:
    with pytest.raises(C.ConfigError) as e:
        C.validate(cfg, C.Lines(sources))
    return str(e.value)


def test_a_yaml_syntax_error_names_file_line_and_column(tmp_path):
    lines = (C.ROOT / "config.yaml").read_text().splitlines()
    n = next(k for k, t in enumerate(lines) if t.strip() == "rows:")
    lines[n] = " " + lines[n]  # one space too many before a key
    bad = tmp_path / "config.yaml"
    bad.write_text("\n".join(lines))
    with pytest.raises(C.ConfigError, match=rf"config.yaml line {n + 1}, column \d+: YAML syntax: .*indentation"):
        C.read_yaml(bad)


def test_duplicate_row_name(toy_config):
    rows(toy_config)[3]["name"] = rows(toy_config)[1]["name"]
    m = err(toy_config)
    assert f"row 4 ({rows(toy_config)[1]['name']!r})" in m and "duplicate of row 2" in m


def test_no_baseline_and_two_baselines(toy_config):
    none = copy.deepcopy(toy_config)
    rows(none)[0]["baseline"] = False
    assert "exactly one row must have baseline: true, found 0" in err(none)
    two = copy.deepcopy(toy_config)
    rows(two)[5]["baseline"] = True
    assert "found 2" in err(two)


def test_unknown_recipe(toy_config):
    i, r = row(toy_config, "fp8w")
    r["weights"] = "fp6"
    m = err(toy_config)
    assert f"row {i} ('fp8w'), field 'weights'" in m and "fp6" in m


@pytest.mark.parametrize("sigma", [-0.1, "big"])
def test_bad_sigma(toy_config, sigma):
    i, r = row(toy_config, "noise-15")
    r["noise_sigma"] = sigma
    m = err(toy_config)
    assert f"row {i} ('noise-15'), field 'noise_sigma'" in m


def test_negative_staleness(toy_config):
    i, r = row(toy_config, "stale-k2")
    r["staleness"] = -1
    assert f"row {i} ('stale-k2'), field 'staleness'" in err(toy_config)


def test_layer_out_of_range_for_the_student(toy_config):
    i, r = row(toy_config, "fp8w-l0")
    r["bf16_layers"] = [2]  # qwen-s has 2 layers: 0, 1 (or -1, -2)
    m = err(toy_config)
    assert f"row {i} ('fp8w-l0'), field 'bf16_layers'" in m and "layer 2 out of range" in m and "'qwen-s'" in m
    r["bf16_layers"] = [-2]
    C.validate(toy_config)


def test_keeping_every_layer_bf16_is_an_error(toy_config):
    i, r = row(toy_config, "fp8w-l0")
    r["bf16_layers"] = [0, -1]  # both layers of qwen-s
    assert f"row {i} ('fp8w-l0'), field 'bf16_layers': keeps every layer of student 'qwen-s'" in err(toy_config)


@pytest.mark.parametrize("key, bad, field", [
    ("rl_collapse", {"entropy_factor": 0.5}, "rl_collapse.entropy_factor"),  # a factor below 1 fires on nothing
    ("rl_collapse", {"accuracy_pts": 5}, "rl_collapse"),  # misspelt: unknown key
    ("kv_attribution", {"prompts": 1}, "kv_attribution.prompts"),  # one prompt has no standard error
])
def test_rl_collapse_and_kv_attribution_settings_are_checked(toy_config, key, bad, field):
    toy_config["experiments"]["toy"][key] = bad
    assert f"experiment 'toy', field '{field}'" in err(toy_config)


@pytest.mark.parametrize("tau", [0, 1, 1.5, -0.2])
def test_tau_outside_open_unit_interval(toy_config, tau):
    toy_config["experiments"]["toy"]["tau"] = tau
    assert "experiment 'toy', field 'tau'" in err(toy_config)


def test_empty_matrix(toy_config):
    toy_config["experiments"]["toy"]["rows"] = []
    assert "experiment 'toy', field 'rows'" in err(toy_config)


@pytest.mark.parametrize("name", ["a/b", "fp8 w", "x;rm", "$(x)", "a.b", ""])
def test_row_names_that_would_break_paths_or_shells(toy_config, name):
    rows(toy_config)[1]["name"] = name
    assert "row 2" in err(toy_config) and "field 'name'" in err(toy_config)


@pytest.mark.parametrize("seeds", [[0.5], ["1"], [1, 1]])
def test_seeds_must_be_distinct_integers(toy_config, seeds):
    toy_config["experiments"]["toy"]["seeds"] = seeds
    assert "field 'seeds" in err(toy_config)


def test_unknown_experiment_and_launcher(toy_config):
    bad = copy.deepcopy(toy_config)
    bad["experiment"] = "nope"
    assert "unknown experiment 'nope'" in err(bad)
    toy_config["launcher"] = "kubernetes"
    assert "field 'launcher'" in err(toy_config)


def test_unknown_student_in_a_row(toy_config):
    rows(toy_config)[1]["students"] = ["qwen-xl"]
    assert "field 'students': unknown student 'qwen-xl'" in err(toy_config)


def test_run_ids_do_not_depend_on_other_columns(toy_config):
    """A run is named by its row, student and seed, not by what the row computes. (The configured rows: the planned
    ones depend on the results, and a column that changes every spec leaves the plan no current run to read.)"""
    from opd.spec import Experiment
    before = {r.run_id: r.row.params() for r in Experiment.of(toy_config).runs()}
    for r in rows(toy_config):
        r["speculative"] = False  # a column added to every row
    after = [r.run_id for r in Experiment.of(toy_config).runs()]
    assert set(after) == set(before)
    assert "fp8w.qwen-m.s0" in before and "bf16.llama-s.s0" in before


def test_placement_fields_are_not_params(toy_config):
    r = next(r for r in C.runs(toy_config) if r.run_id == "fp8w.qwen-s.s0")
    assert r.row.params() == {"name": "fp8w", "weights": "fp8_tensor"}


def test_verl_settings_are_checked_before_any_job(toy_config):
    paper = toy_config["experiments"]["paper"]
    paper["train"]["eval_every"] = 30  # verl checkpoints every 25 steps: step 30 would have no checkpoint
    m = err(toy_config)
    assert "experiment 'paper', field 'train.eval_every'" in m and "multiple of train.checkpoint_every" in m
    paper["train"]["eval_every"] = 50
    paper["verl"]["engine_args"] = {"gpu_memory_utilization": 0.5}  # the key is `engine`
    m = err(toy_config)
    assert "'paper'" in m and "engine_args" in m
    del paper["verl"]["engine_args"]
    del paper["verl"]["data"]["heldout"]
    m = err(toy_config)
    assert "'paper'" in m and "heldout" in m


@pytest.mark.parametrize("ref,msg", [("lr3e-5-k1", "is not another row"), ("nowhere", "is not another row"),
                                     ("bad name", "is not a name")])
def test_bad_reference(toy_config, ref, msg):
    i, r = row(toy_config, "lr3e-5-k1")
    r["reference"] = ref
    m = err(toy_config)
    assert f"row {i} ('lr3e-5-k1'), field 'reference'" in m and msg in m


def test_reference_must_run_the_rows_students(toy_config):
    i, r = row(toy_config, "kv-e4m3")  # runs qwen-s and others
    r["reference"] = "lr3e-5-k0"  # runs qwen-s only
    m = err(toy_config)
    others = sorted(set(r["students"]) - {"qwen-s"})
    assert others and f"row {i} ('kv-e4m3'), field 'reference'" in m and f"does not run student(s) {others}" in m


@pytest.mark.parametrize("lr", [0, -1e-4, "fast"])
def test_bad_row_lr(toy_config, lr):
    i, r = row(toy_config, "lr3e-5-k0")
    r["lr"] = lr
    assert f"row {i} ('lr3e-5-k0'), field 'lr'" in err(toy_config)


def test_row_lr_reaches_the_runs_settings_and_reference_does_not(toy_config):
    _, r = row(toy_config, "lr3e-5-k1")
    train = toy_config["experiments"]["toy"]["train"]
    e = Experiment.of(toy_config)
    assert e.settings(Row.of(r)).lr == 3e-5 and e.settings(Row("x")).lr == train["lr"]
    assert e.settings(Row.of(r)).written() == {**train, "lr": 3e-5}  # what the run's spec holds
    run = next(x for x in C.runs(toy_config) if x.name == "lr3e-5-k1")
    assert "reference" not in run.row.params() and run.row.params()["lr"] == 3e-5  # editing a reference retrains nothing
    assert not Row.of(r).in_budget and Row.of({"name": "x", "weights": "nvfp4"}).in_budget


def test_train_settings_are_typed_and_belong_to_the_backend(toy_config):
    toy_config["experiments"]["toy"]["train"]["eval_every"] = "25"
    assert "experiment 'toy', field 'train.eval_every'" in err(toy_config)
    del toy_config["experiments"]["toy"]["train"]["eval_every"]
    toy_config["experiments"]["toy"]["train"]["lr_shedule"] = "cosine"
    assert "experiment 'toy', field 'train'" in err(toy_config) and "lr_shedule" in err(toy_config)
    del toy_config["experiments"]["toy"]["train"]["lr_shedule"]
    toy_config["experiments"]["toy"]["train"]["max_response_length"] = 64
    assert "field 'train.max_response_length': a verl setting" in err(toy_config)
    del toy_config["experiments"]["toy"]["train"]["max_response_length"]
    del toy_config["experiments"]["paper"]["train"]["temperature"]
    assert "experiment 'paper', field 'train.temperature': the verl backend needs it" in err(toy_config)


def test_an_infra_window_outside_the_run_is_named_before_any_job(toy_config):
    toy_config["experiments"]["toy"]["infra"]["window"] = [200, 300]
    assert "experiment 'toy', field 'infra.window'" in err(toy_config)


def test_guard_fields_are_validated_and_named(toy_config):
    i, r = row(toy_config, "stale-k4-guard")
    for bad, field in [({**r["guard"], "d_max": 0}, "guard.d_max"), ({**r["guard"], "d_max": "budgett"}, "guard.d_max"),
                       ({**r["guard"], "action": "panic"}, "guard.action"), ({**r["guard"], "window": 0}, "guard.window"),
                       ({**r["guard"], "cooldown": 1.5}, "guard.cooldown"), ({"d_max": 0.1}, "guard")]:
        cfg = copy.deepcopy(toy_config)
        rows(cfg)[i - 1]["guard"] = bad
        assert f"experiment 'toy', row {i} ('stale-k4-guard'), field '{field}'" in err(cfg), bad


@pytest.mark.parametrize("name,guard,msg", [
    ("bf16", {"action": "fallback"}, "standard engine already"),
    ("lr3e-5-k0", {"action": "fallback"}, "standard engine already"),
    ("nvfp4", {"action": "sync"}, "synchronous already"),
    ("stale-k4", {"action": "fallback_numerics"}, "numerics are BF16 already"),
    ("nvfp4", {"action": "fallback", "window": 101}, "longer than the 100-step run")])
def test_a_guard_that_could_not_act_is_named(toy_config, name, guard, msg):
    i, r = row(toy_config, name)
    r["guard"] = {"d_max": 0.01, "window": 10, "cooldown": 10, **guard}
    m = err(toy_config)
    assert f"row {i} ('{name}'), field 'guard." in m and msg in m


def test_guard_budget_resolves_to_the_admission_line_and_reaches_the_spec(toy_config):
    e = Experiment.of(toy_config)
    _, r = row(toy_config, "nvfp4-w4a4-guard")
    g = Row.of(r)
    assert not g.in_budget and Row.of({**r, "guard": None}).in_budget  # a guarded row is not one engine
    assert e.guard(g).d_max == r["guard"]["d_max"] and e.guard(Row.of({"name": "x"})) is None
    b = Row.of({**r, "guard": {**r["guard"], "d_max": "budget"}})
    assert e.guard(b).d_max == toy_config["experiments"]["toy"]["admission"]["L"] == e.guard_line
    back = Row.of(b.resolved())  # rows.parquet's form: the guard as a JSON string
    assert back.guard == b.guard and back.params()["guard"] == b.params()["guard"]


def test_a_guarded_row_is_not_plain_opd_so_no_plain_engine_table_takes_it(toy_config):
    """The staleness-vs-lr table, the RL contrast's OPD twin and the verl staleness throughput read plain-OPD
    rows of one engine; a guarded row mixes engines."""
    _, r = row(toy_config, "stale-k4-guard")
    assert not Row.of(r).is_plain_opd and Row.of({k: v for k, v in r.items() if k != "guard"}).is_plain_opd


def test_students_fields_are_typed_and_each_backend_names_what_it_needs(toy_config):
    """A student is an opd.spec.Student: an unknown or mistyped field, or one its backend needs and lacks, is
    named before any job starts (not a KeyError while a job reads it)."""
    toy = toy_config["experiments"]["toy"]["students"]
    cfg = copy.deepcopy(toy_config)
    cfg["experiments"]["toy"]["students"]["qwen-s"]["head"] = 2
    assert "experiment 'toy', field 'students.qwen-s'" in err(cfg) and "head" in err(cfg)
    cfg = copy.deepcopy(toy_config)
    cfg["experiments"]["toy"]["students"]["qwen-s"]["heads"] = "2"
    assert "experiment 'toy', field 'students.qwen-s.heads'" in err(cfg)
    cfg = copy.deepcopy(toy_config)
    del cfg["experiments"]["toy"]["students"]["qwen-m"]["d_ff"]
    assert "experiment 'toy', field 'students.qwen-m.d_ff': the tiny backend needs it" in err(cfg)
    cfg = copy.deepcopy(toy_config)
    del cfg["experiments"]["paper"]["students"]["r1-7b"]["teacher"]
    assert "experiment 'paper', field 'students.r1-7b.teacher': the verl backend needs it" in err(cfg)
    cfg = copy.deepcopy(toy_config)
    del cfg["experiments"]["paper"]["verl"]
    assert "experiment 'paper', field 'verl.data': the verl backend needs it" in err(cfg)
    assert Experiment.of(toy_config).students["qwen-s"].written() == toy["qwen-s"]


def test_an_experiment_without_eval_every_is_valid_and_evaluates_its_first_and_last_step(toy_config):
    del toy_config["experiments"]["toy"]["train"]["eval_every"]
    del toy_config["experiments"]["paper"]["train"]["eval_every"]
    C.validate(toy_config)
    assert Experiment.of(toy_config, "toy").train.eval_steps() == [0, 100]
    assert Experiment.of(toy_config, "paper").train.eval_steps() == [0, 200]


def test_noise_redraw_needs_noise_and_is_refused_on_verl_naming_row_and_field(toy_config):
    i, r = row(toy_config, "fp8w")
    r["noise_redraw"] = True
    assert f"experiment 'toy', row {i} ('fp8w'), field 'noise_redraw': redraws the noise direction" in err(toy_config)
    del r["noise_redraw"]
    paper = toy_config["experiments"]["paper"]["rows"]
    paper.append({"name": "noise-15-redraw", "noise_sigma": 0.15, "noise_redraw": True})
    m = err(toy_config)
    assert (f"experiment 'paper', row {len(paper)} ('noise-15-redraw'), field 'noise_redraw': verl backend: "
            "the weight-sync hook draws the noise direction") in m


def test_the_frozen_admission_rules_are_checked_naming_their_field(toy_config):
    """A frozen rule decides on a statistic the tiny backend measures, by one cut, under a name of its own, and names
    the candidates it was fitted on (its bisected edge's rows included): anything else is named before a job
    starts."""
    rules = toy_config["experiments"]["toy"]["frozen_rules"]
    f = rules[0]
    f["statistic"], f["at_least"] = "T_persist", 1.0
    f["fitted_on"]["qwen-m"].append("stale-k4")  # staleness: not an admission candidate (and not on qwen-m)
    f["fitted_on"]["qwen-xl"] = ["fp8w"]  # a student the matrix no longer has: history, not an error
    rules.append({"name": f["name"], "statistic": "d_hat", "at_most": 0.1, "fitted_on": {}})
    m = err(toy_config)
    assert "experiment 'toy', field 'frozen_rules[0].statistic': 'T_persist' is not a step-0 statistic" in m
    assert "experiment 'toy', field 'frozen_rules[0]': give exactly one of at_most" in m
    assert "field 'frozen_rules[0].fitted_on.qwen-m': row 'stale-k4' is not an admission candidate of 'qwen-m'" in m
    assert f"experiment 'toy', field 'frozen_rules[{len(rules) - 1}].name': {f['name']!r} names an earlier rule" in m
    assert "qwen-xl" not in m
    paper = toy_config["experiments"]["paper"]
    paper["frozen_rules"] = [{"name": "x", "statistic": "d_hat", "at_most": 0.1, "fitted_on": {}}]
    assert "experiment 'paper', field 'frozen_rules[0]': the step-0 statistics it decides on are measured on the " \
           "tiny backend only" in err(toy_config)


def test_the_predictor_study_can_be_turned_off_but_not_under_frozen_rules(toy_config):
    """`predictors: false` (the lean default's) drops the predictor study's jobs and figure; frozen rules, scored on
    its statistics, are refused with it, naming the field."""
    e = toy_config["experiments"]["toy"]
    e["predictors"] = False
    assert "experiment 'toy', field 'frozen_rules': they are scored on the predictor study" in err(toy_config)
    e.pop("frozen_rules")
    C.validate(toy_config)
    assert not Experiment.of(toy_config, "toy").predictors
    assert not O.predictor_rows(O.Matrix.of(e)) and O.predictor_rows(O.Matrix.of({**e, "predictors": True}))


def test_a_trimmed_matrix_keeps_its_frozen_rules_valid(toy_config):
    """Rows and students the rules were fitted on but the matrix no longer holds (a test's or a user's trimmed
    matrix) are history: the config still validates."""
    e = toy_config["experiments"]["toy"]
    e["rows"] = [r for r in e["rows"] if r.get("baseline") or r["name"] == "fp8w"]
    e.pop("edges", None)
    C.validate(toy_config)
    next(r for r in e["rows"] if r["name"] == "fp8w")["students"] = ["qwen-m"]  # a sub-matrix of one student
    C.validate(toy_config)


def test_a_frozen_rule_names_its_prospective_candidates(toy_config):
    """Every candidate a rule was not fitted on is prospective for it; a bisected edge's rows count as fitted on."""
    rule = Experiment.of(toy_config, "toy").frozen_rules[0]
    th = stats.Threshold.of(rule)
    assert th.admits(th.t) and not th.admits(th.t + 1e-9)
    assert not rule.prospective("qwen-s", "nvfp4") and not rule.prospective("llama-s", "edge-0p02")
    assert rule.prospective("qwen-m", "nvfp4") and rule.prospective("qwen-s", "noise-234-redraw")


def test_a_value_set_by_config_on_the_command_line_has_no_line_and_its_siblings_keep_theirs(toy_config):
    at = C.Lines([C.ROOT / "config.yaml"], cli={"experiments": {"toy": {"tau": 0.3}}})
    assert at("experiments", "toy", "tau") == "" and at("experiments", "toy", "tau", "x") == ""
    assert at("experiments", "toy", "rows", 0).startswith("config.yaml line ")


def test_a_bootstrap_too_large_to_compute_is_refused_naming_its_field(toy_config):
    """A huge resamples count would be accepted and then exhaust memory when the plan computes its first interval
    (the config fuzz found it): it is refused before any job, naming the field."""
    toy_config["experiments"]["toy"]["bootstrap"]["resamples"] = 10_000 * 10**9
    assert "experiment 'toy', field 'bootstrap.resamples': 10000000000000 is greater than the maximum" in err(toy_config)


def test_quant_alpha_is_checked_naming_row_and_field_and_refused_on_verl(toy_config):
    """quant_alpha scales the row's quantization error, from BF16 (towards 0) through the recipes (1) to the same
    error amplified (above 1): in (0, 16], on a row that quantizes something (not a noise-only row), and only on the
    tiny backend."""
    toy = rows(toy_config)
    toy.append({"name": "w4a4-a25", "weights": "nvfp4", "activations": "nvfp4", "quant_alpha": 0.25})
    C.validate(toy_config)
    n = len(toy)
    for good in (1.5, 2, 16):  # an amplified error: up to the dial's end
        toy[-1]["quant_alpha"] = good
        C.validate(toy_config)
    for bad, message in ((0, "0 is less than or equal to the minimum of 0"), (-0.5, "-0.5 is less than or equal to "
                         "the minimum of 0"), (16.5, "16.5 is greater than the maximum of 16"),
                         (100, "100 is greater than the maximum of 16"), ("half", "'half' is not of type 'number'")):
        toy[-1]["quant_alpha"] = bad
        assert f"experiment 'toy', row {n} ('w4a4-a25'), field 'quant_alpha': {message}" in err(toy_config)
    toy[-1] = {"name": "noise-a", "noise_sigma": 0.1, "quant_alpha": 0.5}
    assert (f"experiment 'toy', row {n} ('noise-a'), field 'quant_alpha': scales the row's quantization error "
            f"(x_bf16 + quant_alpha (Q(x) - x_bf16)), but the row quantizes nothing (noise_sigma is weight noise"
            ) in err(toy_config)
    toy[-1] = {"name": "plain-a", "quant_alpha": 1}  # even at 1: it says nothing without a quantization
    assert f"row {n} ('plain-a'), field 'quant_alpha': scales" in err(toy_config)
    toy.pop()
    paper = toy_config["experiments"]["paper"]["rows"]
    paper.append({"name": "kv-a50", "kv_cache": "fp8_e4m3", "quant_alpha": 0.5})
    m = err(toy_config)
    assert (f"experiment 'paper', row {len(paper)} ('kv-a50'), field 'quant_alpha': verl backend: 0.5 asks for an "
            f"engine between the BF16 one and the row's quantized one") in m and "tiny backend only" in m
    paper[-1]["quant_alpha"] = 2.0  # an amplified error: refused too, said as what it is
    m = err(toy_config)
    assert (f"experiment 'paper', row {len(paper)} ('kv-a50'), field 'quant_alpha': verl backend: 2 asks for an "
            f"engine beyond the row's quantized one (its quantization error amplified 2 times)") in m
    assert "between the BF16 one" not in m and "tiny backend only" in m
    paper[-1]["quant_alpha"] = 1.0  # the recipes as they are: verl runs them
    C.validate(toy_config)


def test_quant_alpha_has_one_range_in_the_schema_the_row_and_the_dial(toy_config):
    """(0, 16]: the row schema's bounds, opd.rows.QUANT_ALPHA_MAX and the bisected dial's range say the same."""
    from opd import plan as P
    from opd.rows import QUANT_ALPHA_MAX
    node = yaml.safe_load(C.SCHEMA.read_text())["$defs"]["row"]["properties"]["quant_alpha"]
    assert (node["exclusiveMinimum"], node["maximum"]) == (0, QUANT_ALPHA_MAX) == (P.DIALS["quant_alpha"].lo,
                                                                                  P.DIALS["quant_alpha"].hi)
    assert P.DIALS["quant_alpha"].span == "(0, 16]" and "in (0, 16]" in node["description"]


def test_quant_alpha_is_a_row_field_that_changes_no_existing_row(toy_config):
    plain = Row.of({"name": "w4a4", "weights": "nvfp4", "activations": "nvfp4"})
    dialled = Row.of({"name": "w4a4", "weights": "nvfp4", "activations": "nvfp4", "quant_alpha": 0.5})
    assert plain.quant_alpha == 1.0 and "quant_alpha" not in plain.params()  # a default reaches no spec
    assert dialled.params()["quant_alpha"] == 0.5 and dialled.family == plain.family == "activations"
    assert dialled.engine_key != plain.engine_key and dialled.in_budget and not dialled.has_standard_numerics
    assert plain.resolved()["quant_alpha"] == 1.0 and Row.of(dialled.resolved()).quant_alpha == 0.5  # rows.parquet
    assert Row.of({k: v for k, v in plain.resolved().items() if k != "quant_alpha"}).quant_alpha == 1.0  # older file
    for r in [Row.of(x) for x in rows(toy_config)]:
        assert "quant_alpha" not in r.params() and r.family == Row.of(r.written()).family


def test_the_schema_takes_the_dials_and_their_fixed_fields(toy_config):
    e = toy_config["experiments"]["toy"]
    e["rows"].append({"name": "kv-a50", "kv_cache": "fp8_e5m2", "bf16_layers": [0], "quant_alpha": 0.5})
    e["edges"] += [
        {"name": "redraw-edge", "field": "noise_sigma", "fixed": {"noise_redraw": True}, "bracket": [0.05, 0.5],
         "students": ["qwen-s"]},
        {"name": "w4a4-alpha", "field": "quant_alpha", "fixed": {"weights": "nvfp4", "activations": "nvfp4"},
         "bracket": [0.1, 1], "students": ["qwen-s"]},
        {"name": "kv-alpha", "field": "quant_alpha", "fixed": {"kv_cache": "fp8_e4m3", "noise_redraw": False},
         "bracket": [0.05, 0.8], "students": ["qwen-s", "qwen-m"]},
        {"name": "stale-edge", "field": "staleness", "bracket": [1, 16], "students": ["qwen-s"]}]
    C.validate(toy_config)
    x = Experiment.of(toy_config).edges
    assert x[3].fixed_fields == {"kv_cache": "fp8_e4m3", "noise_redraw": False} and hash(x[3])
    assert x[3].written() == e["edges"][3] and x[0].written() == e["edges"][0] and x[0].fixed == ()
    e["edges"][-1]["fixed"] = ["noise_redraw"]
    assert "experiment 'toy', field 'edges.4.fixed': ['noise_redraw'] is not of type 'object'" in err(toy_config)
    e["edges"][-1] = {**e["edges"][-1], "fixed": {}, "field": "lr"}
    assert "field 'edges.4.field': 'lr' is not one of ['noise_sigma', 'quant_alpha', 'staleness']" in err(toy_config)


@pytest.mark.parametrize("field, bracket, fixed", [
    ("noise_sigma", [0.05, 0.5], {"weights": "fp8_tensor"}),  # a recipe and noise: two dials
    ("quant_alpha", [0.1, 1], {"kv_cache": "fp8_e4m3", "bf16_layers": [0]}),  # BF16 layers: on no dial
    ("staleness", [1, 16], {"noise_sigma": 0.1}),
    ("staleness", [1, 16], {"speculative": True}),
    ("staleness", [1, 16], {"weights": "nvfp4"}),
])
def test_an_edge_whose_rows_lie_on_no_dial_is_refused_naming_the_edge_and_fixed(toy_config, field, bracket, fixed):
    """edges.parquet finds an edge's rows by their mechanism (opd.rows.mechanism): `fixed` fields that put them on
    no dial would train rows the edges table silently leaves out, so validation refuses them."""
    e = toy_config["experiments"]["toy"]
    e["edges"].append({"name": "off-dial", "field": field, "fixed": fixed, "bracket": bracket, "students": ["qwen-s"]})
    n = len(e["edges"])
    m = err(toy_config)
    assert f"experiment 'toy', edge {n} ('off-dial'), field 'fixed': {field} with " in m, m
    assert "would put its rows on no dial (opd.rows.mechanism" in m and "edges.parquet would leave out" in m
    e["edges"][-1]["fixed"] = {"noise_redraw": True} if field == "noise_sigma" else \
        {"kv_cache": "fp8_e4m3"} if field == "quant_alpha" else {}
    C.validate(toy_config)  # the same edge on its dial
