"""Around Snakemake itself (the Snakefile calls these): a quiet terminal by default (`--verbose` shows everything), and
its report's per-file warnings, collapsed to one line."""
from __future__ import annotations

import atexit
import logging
import sys
from pathlib import Path

MISSING = "Missing metadata for file "

# What a real run keeps off the terminal (Snakemake's log file keeps it all): each job's block, its start and end, the
# progress count, the job and resource tables (Snakemake's log events), the host block, and the chatter around them.
# Warnings, errors, "Nothing to be done" and whatever else Snakemake says still show.
QUIET_EVENTS = {"job_info", "job_started", "job_finished", "progress", "resources_info", "run_info"}
QUIET_LINES = ("Assuming unrestricted shared filesystem usage", "Building DAG of jobs", "Using shell:",
               "Select jobs to execute", "Waiting for running jobs to complete", "Complete log(s):", "Elapsed time:")


class _Quiet(logging.Filter):
    """Drops, below warnings, the records of QUIET_EVENTS, the host block and the QUIET_LINES."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            return True
        if getattr(record, "event", None) in QUIET_EVENTS:
            return False
        if getattr(getattr(record, "quietness", None), "name", None) == "HOST":
            return False
        return not (isinstance(record.msg, str) and record.msg.startswith(QUIET_LINES))


def quiet_terminal(workflow, logger: logging.Logger | None = None) -> bool:
    """A real run (not a dry run, not `--verbose`) keeps Snakemake's per-job lines off the terminal: the run says what
    it did in its own few lines at the end (opd.summary), and Snakemake's log file (.snakemake/log/) keeps every line.
    A dry run lists its jobs as Snakemake does; `--verbose` shows everything. True where the terminal is quiet (a
    logger plugin that writes to the terminal itself is left alone)."""
    s = workflow.output_settings
    if s.verbose or s.dryrun:
        return False
    if logger is None:
        from snakemake.logging import logger
    handler = next((h for h in logger.handlers if h.name == "DefaultStreamHandler"), None)
    if handler is None:
        return False
    handler.addFilter(_Quiet())
    return True


def unthrottled(workflow) -> None:
    """Snakemake's job-start limit off for this call (the Snakefile's `onstart`, which runs after Snakemake has built
    its scheduler and before the first job starts): the state its Python API gives for `max_jobs_per_timespan=None`,
    which its command line cannot say (there the default is 100 starts a second). With a limit, Snakemake 9's
    scheduler re-arms a timer at the end of every pass of its loop and every finished job starts one more such chain,
    so after N jobs its loop runs N times a second: on the lean default's first round Snakemake's own process used
    68 s of CPU in its first 5 minutes, 3 s without, CPU the training jobs lose. A longer timespan in a profile is no
    way out: the timers are not daemon threads, so Snakemake then waits up to a timespan to exit. This pipeline
    starts a few hundred jobs, never 100 a second. A Snakemake without this scheduler attribute is left as it is.
    benchmarks/snakemake_overhead.py measures it."""
    scheduler = getattr(workflow, "scheduler", None)
    if getattr(scheduler, "job_rate_limiter", None) is not None:
        scheduler.job_rate_limiter = None


class _Unrecorded(logging.Filter):
    """Drops Snakemake's "Missing metadata for file F. ..." warnings and keeps their files."""

    def __init__(self):
        super().__init__()
        self.files: list[str] = []

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        if not msg.startswith(MISSING):
            return True
        self.files.append(msg[len(MISSING):].split(". Maybe metadata", 1)[0])
        return False


def unrecorded_files(listing: str, logger: logging.Logger | None = None) -> _Unrecorded:
    """`snakemake --report` warns once for every file of the DAG this checkout's Snakemake has no job record of:
    in a fresh clone every committed run and measurement (hundreds of lines). Those warnings are dropped; at exit
    one line says how many there were, and `listing` (rewritten atomically) names them, one a line."""
    if logger is None:
        from snakemake.logging import logger
    f = _Unrecorded()
    logger.addFilter(f)

    def summary():
        if not f.files:
            return
        from opd import store
        path = Path(listing)
        path.parent.mkdir(parents=True, exist_ok=True)
        store.atomic_write(path, lambda tmp: Path(tmp).write_text("".join(p + "\n" for p in f.files)))
        print(f"{len(f.files)} files of the DAG have no Snakemake job record in this checkout (results checked "
              f"out from git, or made by another checkout): the report shows them without their job's details; "
              f"listed in {listing}", file=sys.stderr, flush=True)

    atexit.register(summary)
    return f
