"""What a `snakemake` call says: a real run's terminal keeps Snakemake's per-job lines out (its log keeps them; a dry
run and `--verbose` show them) and ends with at most 10 lines, the decisions of the measurements it made last
(opd.smk, opd.summary). tests/test_docs.py runs README command 1 and the measurement commands through snakemake."""
import logging
from types import SimpleNamespace

from opd import smk, summary


def record(msg, level=logging.INFO, **extra):
    r = logging.LogRecord("snakemake.logging", level, __file__, 1, msg, None, None)
    r.__dict__.update(extra)
    return r


def test_the_quiet_terminal_drops_the_jobs_and_keeps_warnings_errors_and_the_rest():
    q = smk._Quiet()
    dropped = [record(None, event="job_info"), record("Execute 2 jobs...", event="job_started"),
               record(None, event="job_finished"), record("3 of 36 steps (8%) done", event="progress"),
               record("Job stats:", event="run_info"), record("Select jobs to execute..."),
               record("Building DAG of jobs..."), record("Complete log(s): /x/.snakemake/log/a.snakemake.log"),
               record("Host: vm", quietness=SimpleNamespace(name="HOST"))]
    kept = [record("Nothing to be done (all requested files are present and up to date)."),
            record("Error in rule x:", level=logging.ERROR, event="job_error"),
            record("Missing metadata for file f", level=logging.WARNING), record("Report created."),
            record("python -m opd.cli train ...", event="shellcmd")]
    assert [q.filter(r) for r in dropped] == [False] * len(dropped)
    assert [q.filter(r) for r in kept] == [True] * len(kept)


def test_only_a_real_run_without_verbose_is_quiet():
    def workflow(**settings):
        return SimpleNamespace(output_settings=SimpleNamespace(**{"verbose": False, "dryrun": False, **settings}))
    logger = logging.getLogger("test-summary")
    handler = logging.StreamHandler()
    handler.name = "DefaultStreamHandler"
    logger.addHandler(handler)
    try:
        assert not smk.quiet_terminal(workflow(dryrun=True), logger) and not handler.filters
        assert not smk.quiet_terminal(workflow(verbose=True), logger) and not handler.filters
        assert smk.quiet_terminal(workflow(), logger) and isinstance(handler.filters[0], smk._Quiet)
    finally:
        logger.removeHandler(handler)
    assert not smk.quiet_terminal(workflow(), logging.getLogger("no-terminal-handler"))  # a logger plugin's


def test_the_summary_fits_ten_lines_and_ends_with_the_decisions():
    jobs = ([("train", {"run_id": f"r.s{i}"}) for i in range(3)] + [("job_spec", {})] * 4
            + [("figure_budget", {}), ("figure_noise", {}), ("table_runs", {}), ("analysis", {})])
    first = summary.ran(jobs, 125.0, "/c/.snakemake/log/a.snakemake.log")
    assert first.startswith("done in 2 min 05 s: 11 job(s), 3 run(s) trained (2 figures, analysis, table)")
    assert first.endswith("Snakemake's log /c/.snakemake/log/a.snakemake.log")
    assert "no run trained" in summary.ran([("analysis", {})], 1.0, None)
    assert "(base_models x3)" in summary.ran([("base_models", {"base": b}) for b in "abc"], 1.0, None)
    changes = [f"verdict of row{i}: qwen-s: new: ..." for i in range(7)]
    decisions = [f"admission row{i}.qwen-s: D̂ = 0.01 ± 0.002 (16 prompts) ...: admit" for i in range(3)]
    out = summary.lines(first, changes, "plan: no run left to train; every decision is made", "figures/toy/findings.md",
                        decisions, more=5)
    assert len(out) == summary.MAX_LINES and out[0] == first
    assert out[1:4] == changes[:3] and out[4].startswith("verdicts: 4 more row(s)")
    assert out[-3] == "decisions: 6 more made before these (`python -m opd.cli verdict ROW`)"
    assert out[-2:] == decisions[-2:]  # the last decisions last
    quiet = summary.lines(first, [], None, None, [])
    assert quiet == [first, "verdicts: none new or changed"]


TIMERS = """
import sys, threading
sys.path.insert(0, {root!r})
from opd import smk
{hook}
onsuccess:
    alive = [t for t in threading.enumerate() if isinstance(t, threading.Timer) and t.is_alive()]
    open("timers.txt", "w").write(str(len(alive)))

rule all:
    input: expand("done/{{i}}", i=range(8))

rule job:
    output: "done/{{i}}"
    shell: "touch {{output}}"
"""


def test_the_snakefile_turns_off_snakemakes_job_start_limit_and_its_timers(tmp_path):
    """Snakemake's default job-start limit leaves a timer chain per finished job (its scheduler's loop then runs that
    many times a second; benchmarks/snakemake_overhead.py); opd.smk.unthrottled, the Snakefile's onstart, leaves none."""
    import subprocess
    import sys
    from conftest import ROOT
    alive = {}
    for name, hook in (("default", ""), ("unthrottled", "onstart:\n    smk.unthrottled(workflow)")):
        d = tmp_path / name
        d.mkdir()
        (d / "Snakefile").write_text(TIMERS.format(root=str(ROOT), hook=hook))
        r = subprocess.run([sys.executable, "-m", "snakemake", "-c", "2"], cwd=d, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-2000:]
        alive[name] = int((d / "timers.txt").read_text())
    assert alive["default"] >= 1 and alive["unthrottled"] == 0, alive
    assert "smk.unthrottled(workflow)" in (ROOT / "Snakefile").read_text().split("onstart:", 1)[1].split("\n\n")[0]
