"""What every `script:` of the workflow does around its own work: run `main(input, output, params)`
with its output (warnings, progress, and the traceback if it fails) in the rule's `log:` file."""
from __future__ import annotations

import contextlib
import sys
import traceback


def run(main, snakemake) -> None:
    log = snakemake.log[0] if len(snakemake.log) else None
    with (open(log, "w") if log else contextlib.nullcontext(sys.stderr)) as f:
        with contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
            try:
                main(snakemake.input, snakemake.output, snakemake.params)
            except BaseException:
                traceback.print_exc()  # into the log the rule's error names, as well as on the terminal
                raise
