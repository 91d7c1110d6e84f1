"""The verl backend's checks of an experiment that names it, beyond the schema: what verl 0.9.1 cannot run of its
settings and rows, and its `verl.logger` and `verl.extra_overrides` against every run's own overrides. Registered in
opd.backends.CONFIG_CHECKS, which opd.config.validate reads (no torch, no verl needed)."""
from __future__ import annotations

from . import plan


def config_errors(cfg: dict, experiment: str) -> list[tuple[int | None, str, str]]:
    """(row index, or None for the experiment's own settings; field; why) for each thing verl cannot run."""
    e = cfg["experiments"][experiment]
    out: list[tuple[int | None, str, str]] = [(None, *msg.split(": ", 1))
                                              for msg in plan.experiment_errors(e, cfg.get("slurm"))]
    if e.get("verl", {}).get("extra_overrides") or "logger" in e.get("verl", {}):
        from .overrides import extra_override_errors
        out += [(None, *m.split(": ", 1)) for m in extra_override_errors(cfg, experiment)]
    out += [(i, *msg.split(": ", 1)) for i, r in enumerate(e["rows"]) for msg in plan.errors(r, e)]
    return out
