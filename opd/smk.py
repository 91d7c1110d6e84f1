"""Around Snakemake itself (the Snakefile calls these): its report's per-file warnings, collapsed to one line."""
from __future__ import annotations

import atexit
import logging
import sys
from pathlib import Path

MISSING = "Missing metadata for file "


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
