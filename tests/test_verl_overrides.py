"""The verl backend's site settings: `verl.logger` (trainer.logger) and the validated `verl.extra_overrides`
pass-through, composed against verl 0.9.1's own Hydra config."""
import copy

import pytest

from opd import config as C
from opd.backends.verl.overrides import ASYNC_ENTRY, entry_point, run_overrides
from test_verl import verl_compose

EXTRA = ["actor_rollout_ref.rollout.gpu_memory_utilization=0.55",  # a number stays a number
         "+actor_rollout_ref.rollout.engine_kwargs.vllm.enforce_eager=true",  # + adds a key verl's config lacks
         "trainer.max_actor_ckpt_to_keep=2",
         "trainer.validation_data_dir=/scratch/my runs, v2"]  # a string with a space and a comma: quoted


@pytest.fixture(scope="module")
def toy_cfg():
    return C.load()


def paper_with(cfg, **verl):
    c = copy.deepcopy(cfg)
    c["experiments"]["paper"]["verl"].update(verl)
    return c


def test_logger_and_extra_overrides_compose_against_verls_config(toy_cfg):
    cfg = paper_with(toy_cfg, logger=["console", "file", "wandb"], extra_overrides=EXTRA)
    C.validate(cfg)
    runs = C.runs(cfg, "paper")
    for run in (next(r for r in runs if r.row.staleness == 0), next(r for r in runs if r.row.staleness > 0)):
        ov = run_overrides(cfg, run, run_dir=f"runs/{run.run_id}")
        composed = verl_compose(ov, entry_point(run.row) == ASYNC_ENTRY)
        assert list(composed.trainer.logger) == ["console", "file", "wandb"]
        assert composed.actor_rollout_ref.rollout.gpu_memory_utilization == 0.55
        assert composed.actor_rollout_ref.rollout.engine_kwargs.vllm.enforce_eager is True
        assert composed.trainer.max_actor_ckpt_to_keep == 2
        assert composed.trainer.validation_data_dir == "/scratch/my runs, v2"
    # without either setting the runs log to console and file, as before
    plain = run_overrides(toy_cfg, C.runs(toy_cfg, "paper")[0])
    assert list(verl_compose(plain, False).trainer.logger) == ["console", "file"]


@pytest.mark.parametrize("bad, why", [
    ("actor_rollout_ref.actor.optim.lr=1e-5", "overlaps actor_rollout_ref.actor.optim.lr, which the project sets"),
    ("trainer.logger=[wandb]", "(verl.logger for trainer.logger)"),
    ("+actor_rollout_ref.rollout.engine_kwargs.vllm.additional_config.x=1", "overlaps actor_rollout_ref.rollout."
                                                                             "engine_kwargs.vllm.additional_config"),
    ("actor_rollout_ref=1", "overlaps actor_rollout_ref."),
    ("trainer.project_name=${oc.env:USER}", "contains '${'"),
    ("gpu_memory_utilization 0.5", "is not key=value"),
])
def test_bad_extra_overrides_are_refused_naming_them(toy_cfg, bad, why):
    with pytest.raises(C.ConfigError) as e:
        C.validate(paper_with(toy_cfg, extra_overrides=[bad]))
    msg = str(e.value)
    assert "experiment 'paper', field 'verl.extra_overrides'" in msg and repr(bad) in msg and why in msg


def test_a_logger_without_file_is_refused(toy_cfg):
    with pytest.raises(C.ConfigError, match="field 'verl.logger': must include 'file'"):
        C.validate(paper_with(toy_cfg, logger=["console", "wandb"]))
    with pytest.raises(C.ConfigError, match="verl.logger"):
        C.validate(paper_with(toy_cfg, logger=["file", "neptune"]))  # not one of verl's backends (schema)
