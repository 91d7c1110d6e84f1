"""Every string from the config or the filesystem reaches verl's Hydra config exactly (issue 17, item 2):
every run of the paper experiment, with hostile but legal paths and model names, composed against verl's
installed config (as tests/test_verl.py composes them), then resolved as verl resolves it at start. A model is
an existing folder or a Hub id `org/name` (opd.backends.verl.site.location refuses anything else), so every model
folder a test names is made under its tmp_path first (resolved: the jobs get a model folder's resolved path)."""
import copy
import os
import re

import pytest
from omegaconf import OmegaConf

from opd import config as C
from opd.backends.verl.overrides import ASYNC_ENTRY, hydra_value, run_overrides
from helpers import folder, load_script
from test_verl import verl_compose


def test_every_paper_run_composes_hostile_paths_to_exactly_the_strings_given(paper_composed):
    """conftest.paper_composed: each paper run composed once a session, with helpers.hostile's paths."""
    assert len(paper_composed) >= 22
    for run_id, (cfg, e, r, run_dir, ov, composed) in paper_composed.items():
        s = e["students"][r.student]
        row = next(x for x in e["rows"] if x["name"] == r.name)  # as config.yaml writes it
        resolved = copy.deepcopy(composed)  # a copy: the composition is the session's
        OmegaConf.resolve(resolved)  # as verl resolves it (main_ppo.py:145)
        for c in (composed, resolved):
            assert c.actor_rollout_ref.model.path == s["model"], r.run_id
            assert list(c.data.train_files) == [os.path.abspath(e["verl"]["data"]["train"])]
            assert list(c.data.val_files) == [os.path.abspath(f) for f in e["verl"]["data"]["heldout"]]
            assert c.trainer.default_local_dir == os.path.join(run_dir, "verl_checkpoints")
            assert c.ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH == os.path.join(
                run_dir, "verl.0.jsonl")
            assert c.trainer.experiment_name == r.run_id
            if row.get("algorithm", "opd") == "opd":
                assert c.distillation.teacher_models.teacher_model.model_path == s["teacher"]
            if row.get("speculative"):
                assert c.actor_rollout_ref.rollout.engine_kwargs.vllm.speculative_config.model == s["eagle3"]


def test_the_gpu_smoke_commands_quote_their_paths_too(tmp_path):
    smoke = load_script("benchmarks/verl_smoke.py")
    out = tmp_path.resolve() / "smoke, [a]={b} 'c' $d ü\\"
    for model in ("student", "teacher"):  # the folders the smoke's prepare exports its toy models to
        folder(str(out / model))
    entry, ov = smoke.command(out, smoke.ROWS[0], 2)
    c = verl_compose(ov, entry == ASYNC_ENTRY)
    assert c.actor_rollout_ref.model.path == str(out / "student")
    assert list(c.data.train_files) == [str(out / "train.parquet")]
    assert c.reward.custom_reward_function.path.endswith(os.path.join("opd", "backends", "verl", "reward.py"))


def test_an_interpolation_in_a_path_is_refused_before_verl_starts(tmp_path):
    """'${' composes as text when escaped, but verl resolves its config and would then read it as an
    interpolation: it is refused, naming the value (a folder that exists, so the refusal is the quoting's)."""
    cfg = C.load()
    model = folder(f"{tmp_path.resolve()}/models/${{USER}}/r1")
    next(iter(cfg["experiments"]["paper"]["students"].values()))["model"] = model
    r = C.runs(cfg, "paper")[0]
    with pytest.raises(ValueError, match=re.escape(f"{model!r} contains '${{'")):
        run_overrides(cfg, r, run_dir=str(tmp_path))
    assert hydra_value("$HOME") == "'$HOME'"
