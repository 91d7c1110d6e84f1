"""verl's own Hydra configuration, composed in this process from a run's overrides exactly as verl's entry points
compose it from their command line (the tests, and benchmarks/verl_smoke.py, which passes the composed config to
verl's entry points in one driver process), and the checks verl's synchronous entry point makes before it asks Ray
for anything. File:line are under the installed `verl` package (0.9.1)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

VERL = Path(importlib.util.find_spec("verl").submodule_search_locations[0])


def compose(ov: list[str], asynchronous: bool):
    """The config verl's entry point builds from `ov`: trainer/config/ppo_trainer.yaml (main_ppo.py:166), or for
    k > 0 experimental/fully_async_policy/config/fully_async_ppo_trainer.yaml (fully_async_main.py:222), whose
    defaults list reads ppo_trainer from verl's trainer config (its `hydra.searchpath`, given here as a folder)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    GlobalHydra.instance().clear()
    d = VERL / ("experimental/fully_async_policy/config" if asynchronous else "trainer/config")
    extra = [f"hydra.searchpath=[file://{VERL / 'trainer/config'}]"] if asynchronous else []
    with initialize_config_dir(config_dir=str(d), version_base=None):
        cfg = hydra_compose(config_name="fully_async_ppo_trainer" if asynchronous else "ppo_trainer",
                            overrides=ov + extra)
    GlobalHydra.instance().clear()
    return cfg


def startup_checks(cfg) -> None:
    """What verl's synchronous entry point does with a composed config before it needs GPUs: main_ppo's
    validate_config (main_ppo.py:177-181: batch and micro-batch sizes, the actor's dataclass), every interpolation
    resolved (the task runner resolves the config, main_ppo.py:145), and the rollout, distillation and
    checkpoint-engine dataclasses its workers build."""
    from omegaconf import OmegaConf
    from verl.trainer.main_ppo import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config
    validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    OmegaConf.to_container(cfg, resolve=True)
    omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
    omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout.checkpoint_engine)
    omega_conf_to_dataclass(cfg.distillation)
