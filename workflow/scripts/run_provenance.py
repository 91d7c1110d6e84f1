"""Every run's provenance, one line per run from its run.json: row, student, seed, status, code version (commit,
and whether opd/ had uncommitted changes), package versions and hardware (each distinct set named once, in
full, in the notes), launcher and Slurm job ids, start and wall time."""
import pandas as pd

from opd import report, scripts, store


def code(c: dict) -> str:
    commit = (c or {}).get("commit")
    if not commit:
        return "unknown"
    return commit[:10] + ("+dirty" if c.get("dirty") else "" if c.get("dirty") is False else "?")


def hardware(h: dict) -> str:
    parts = [h.get("machine", "?"), f"{h.get('cpus', '?')} CPUs", f"torch threads {h.get('torch_threads', '?')}"]
    if h.get("gpu"):
        parts.insert(1, f"{h.get('gpus', 1)}x {h['gpu']}")
    return ", ".join(str(p) for p in parts) + f" on {h.get('host', '?')}, Python {h.get('python', '?')}"


def named_sets(values: list[str], prefix: str) -> tuple[list[str], list[str]]:
    """Each distinct value gets a short name (P1, P2, ... in order of first appearance): the names per run,
    and one note line per name."""
    names = {}
    for v in values:
        names.setdefault(v, f"{prefix}{len(names) + 1}")
    return [names[v] for v in values], [f"{n}: {v}" for v, n in names.items()]


def provenance(metas: list[dict]) -> tuple[pd.DataFrame, str]:
    packages, package_notes = named_sets(
        [", ".join(f"{k} {v}" for k, v in sorted(m.get("packages", {}).items())) or "not recorded" for m in metas], "P")
    hw, hw_notes = named_sets([hardware(m.get("hardware", {})) for m in metas], "H")
    t = pd.DataFrame([{
        "run": m["run_id"], "row": m.get("row", {}).get("name", "?"), "student": m.get("student", "?"),
        "seed": m.get("seed", "?"), "status": m.get("status", "?"), "code": code(m.get("code")),
        "packages": p, "hardware": h, "launcher": m.get("launcher", "?"),
        "Slurm jobs": " ".join(m.get("slurm_job_ids") or []) or "–", "attempts": m.get("attempts", 1),
        "start (UTC)": (m.get("start") or "?")[:19].replace("T", " "), "wall s": m.get("wall_s", float("nan")),
    } for m, p, h in zip(metas, packages, hw)])
    notes = ("Packages: " + "; ".join(package_notes) + ". Hardware: " + "; ".join(hw_notes) + ". Code: git commit "
             "of the checkout that ran the job (+dirty: opd/ had uncommitted changes).")
    return t, notes


def main(inp, out, params):
    metas = sorted((store.read_json(p) for p in inp), key=lambda m: m["run_id"])
    t, notes = provenance(metas)
    wall = t["wall s"].sum()
    report.save_table(t, out.md, out.tex, inp, digits=4, notes=notes,
                      caption=f"Provenance of every run of experiment '{params.experiment}' ({len(t)} runs, "
                              f"{wall / 3600:.1f} h of training wall time summed over them)")
    print(f"run_provenance: {len(t)} runs, {t['code'].nunique()} code versions, {len(set(t['packages']))} package "
          f"sets, {len(set(t['hardware']))} machines, {wall / 60:.1f} min of training wall time -> {out.md}")


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
