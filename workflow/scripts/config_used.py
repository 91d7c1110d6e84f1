"""The configuration Snakemake resolved for this build (config.yaml, then any --configfile, --config and a
profile's), as YAML and as an HTML page: the report's record of the configuration used (Snakemake 9's
HTML report records the config files but does not show them)."""
from pathlib import Path

import yaml

from opd import report, scripts, store


def main(inp, out, params):
    text = yaml.safe_dump(params.config, sort_keys=False, allow_unicode=True)
    title = f"Configuration used (experiment {params.experiment}; read from {', '.join(params.files)})"
    store.atomic_write(Path(out.yaml), lambda tmp: Path(tmp).write_text(text))
    store.atomic_write(Path(out.html), lambda tmp: Path(tmp).write_text(report.text_html(text, title)))
    print(f"config_used: experiment {params.experiment}, {len(text.splitlines())} lines of YAML from "
          f"{', '.join(params.files)} -> {out.yaml}")


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
