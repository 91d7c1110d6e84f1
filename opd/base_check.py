"""The base models' acceptance check (tiny backend; issue 43, item 0): are a student's base-model draws one student?

For each student, each draw's initial held-out KL (the number its OPD runs report at step 0) and its teacher's final
held-out cross-entropy are measured from the saved models (opd.backends.tiny.sft.measure_base), and judged against
the experiment's pre-registered band (opd.spec.BaseAcceptance): every draw's KL within `kl_within` of the draws'
mean, the teachers' cross-entropies within `teacher_loss_ratio` (max / min). The table: `table`; the command:
`python -m opd.cli base-acceptance` (rule base_acceptance)."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from opd.spec import BaseAcceptance, Experiment, base_name


def table(draws: pd.DataFrame, band: BaseAcceptance) -> pd.DataFrame:
    """One row per student from `draws` (columns student, draw, initial_kl, teacher_ce): the draws' KLs and
    cross-entropies (in draw order), the KLs' mean and largest relative deviation from it, the cross-entropies'
    max / min, and whether each is within the band (`kl_pass`, `loss_pass`; `accepted`: both)."""
    need = {"student", "draw", "initial_kl", "teacher_ce"}
    if not need <= set(draws.columns):
        raise ValueError(f"base acceptance: the draws' table lacks {sorted(need - set(draws.columns))}")
    out = []
    for student, g in draws.groupby("student", sort=False):
        g = g.sort_values("draw")
        if len(g) < 2:
            raise ValueError(f"base acceptance: student {student!r} has {len(g)} draw(s); the check compares two or more")
        kl, ce = g["initial_kl"].to_numpy(float), g["teacher_ce"].to_numpy(float)
        mean = kl.mean()
        dev = float(abs(kl - mean).max() / mean)
        ratio = float(ce.max() / ce.min())
        out.append({"student": student, "draws": len(g), "initial_kl": [round(float(x), 6) for x in kl],
                    "kl_mean": float(mean), "kl_max_dev": dev, "kl_pass": dev <= band.kl_within,
                    "teacher_ce": [round(float(x), 6) for x in ce], "ce_ratio": ratio,
                    "loss_pass": ratio <= band.teacher_loss_ratio})
        out[-1]["accepted"] = out[-1]["kl_pass"] and out[-1]["loss_pass"]
    return pd.DataFrame(out)


def markdown(t: pd.DataFrame, band: BaseAcceptance, title: str) -> str:
    """The table as Markdown, with the band it was judged against in its heading."""
    lines = [f"# {title}", "",
             f"Band (pre-registered): every draw's initial held-out KL within ±{band.kl_within:.0%} of the draws' mean; "
             f"the teachers' final held-out cross-entropies within {band.teacher_loss_ratio:g}x (max / min).", "",
             "| student | initial held-out KL per draw | mean | max deviation | teachers' held-out CE per draw | "
             "max / min | KL | CE | accepted |",
             "|---|---|---|---|---|---|---|---|---|"]
    yes = {True: "pass", False: "fail"}
    for r in t.itertuples():
        lines.append(f"| {r.student} | {' / '.join(f'{x:.4g}' for x in r.initial_kl)} | {r.kl_mean:.4g} | "
                     f"{r.kl_max_dev:.1%} | {' / '.join(f'{x:.3g}' for x in r.teacher_ce)} | {r.ce_ratio:.2f} | "
                     f"{yes[r.kl_pass]} | {yes[r.loss_pass]} | {'yes' if r.accepted else 'no'} |")
    return "\n".join(lines) + "\n"


def measure(e: Experiment, models: Path) -> pd.DataFrame:
    """Every student's draws measured from its saved base models under `models` (results/<experiment>/_models):
    initial held-out KL (the experiment's eval_responses and task seed), teacher's held-out cross-entropy, and what
    each base.json recorded of the recipe (student and teacher steps, the KL the recipe measured, where it did)."""
    from opd.backends.tiny.sft import measure_base
    rows = []
    for student in e.students:
        for d in e.draws():
            folder = Path(models) / base_name(student, d)
            meta = json.loads((folder / "base.json").read_text())
            kl, ce = measure_base(folder, e.train.task_seed, e.train.eval_responses)
            s = e.base_student(student, d)
            rows.append({"student": student, "draw": d, "sft_seed": s.seed, "initial_kl": kl, "teacher_ce": ce,
                         "recipe": meta.get("recipe", "fixed"),
                         "student_step": meta.get("student_step", s.student_steps),
                         "teacher_step": meta.get("teacher_step", s.teacher_steps),
                         "plateau": meta.get("plateau"), "recorded_kl": meta.get("student_kl")})
    return pd.DataFrame(rows)


FILES = {"table": "base_acceptance.parquet", "draws": "base_draws.parquet", "markdown": "base_acceptance.md"}


def merged(paths) -> dict:
    """Config files read in order, each merged into the ones before it as Snakemake merges --configfile (mappings
    key by key, anything else replaced), then validated."""
    from opd import config as C

    def merge(a, b):
        return {**a, **{k: merge(a[k], v) if isinstance(a.get(k), dict) and isinstance(v, dict) else v
                        for k, v in b.items()}}
    cfg: dict = {}
    for p in paths:
        cfg = merge(cfg, C.read_yaml(p))
    C.validate(cfg, C.Lines(list(paths)))
    return cfg


def main(config_paths, experiment: str | None, band_from: str | None, out: Path) -> int:
    """Measure an experiment's base models and write FILES under `out` (atomically), judged against its own band or
    `band_from`'s (an experiment of the same config: today's recipe judged against the converged recipe's band)."""
    from opd import store
    from opd.spec import results_dir
    cfg = merged(config_paths)
    e = Experiment.of(cfg, experiment)
    band = (Experiment.of(cfg, band_from) if band_from else e).base_acceptance
    if e.backend != "tiny":
        raise ValueError(f"experiment {e.name!r}: base acceptance measures the tiny backend's own base models")
    if band is None:
        raise ValueError(f"experiment {band_from or e.name!r}: no base_acceptance band in the config (name one with "
                         f"--band-from)")
    draws = measure(e, Path(results_dir(e.name)) / "_models")
    t = table(draws, band)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    store.write_table(draws, out / FILES["draws"])
    store.write_table(t, out / FILES["table"])
    text = markdown(t, band, f"Base models of experiment {e.name!r}: one student each? ({len(e.draws())} SFT draws; "
                             f"band of {band_from or e.name!r})")
    store.atomic_write(out / FILES["markdown"], lambda tmp: Path(tmp).write_text(text))
    print(text)
    return 0 if t["accepted"].all() else 1
