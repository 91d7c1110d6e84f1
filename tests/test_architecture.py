"""docs/architecture.md is true to the code: every file and folder it names exists, every rule file is in its
stages table, every rule it names is defined, and every name it cites from a module is there."""
import importlib
import re

from conftest import ROOT

PAGE = ROOT / "docs" / "architecture.md"
TEXT = PAGE.read_text()
CODE = re.findall(r"`([^`]+)`", TEXT)
GENERATED = {"logs"}  # folders the pipeline writes and git ignores


def named_paths() -> list[str]:
    """Repository paths in backticks (a slash in them, no spaces, no command), placeholders cut off."""
    out = []
    for c in CODE:
        if " " in c or "/" not in c or c.startswith(("python", "snakemake")):
            continue
        out.append(c.split("<", 1)[0].rstrip("/") if "<" in c else c.rstrip("/"))
    return out


def test_every_file_it_names_exists():
    paths = named_paths()
    assert len(paths) > 20
    # logs/ is made by the first run (gitignored): a fresh clone has none
    missing = [p for p in paths if p and p.split("/")[0] not in GENERATED and not (ROOT / p).exists()]
    assert not missing, f"docs/architecture.md names files that do not exist: {missing}"


def test_every_rule_file_is_in_the_stages_table_and_every_rule_named_is_defined():
    table = TEXT[TEXT.index("| stage |"):TEXT.index("\n\n", TEXT.index("| stage |"))]
    rule_files = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "workflow" / "rules").glob("*.smk"))
    for f in rule_files:
        assert f"`{f}`" in table, f"{f} is not in the stages table"
    defined = set()
    for f in (ROOT / "Snakefile", *(ROOT / "workflow" / "rules").glob("*.smk")):
        defined |= set(re.findall(r"^\s*(?:rule|use rule \w+ as) (\w+)(?: with)?:", f.read_text(), re.M))
    for line in table.splitlines()[2:]:
        cells = line.split("|")
        for rule in re.findall(r"`([a-z_]+)`", cells[3]):  # (OUTPUTS: opd/outputs.py's table, checked below)
            assert rule in defined, f"rule {rule} (stages table) is not defined"


def test_the_names_it_cites_from_modules_exist():
    cited = {("opd.outputs", "ANALYSIS_TABLES"), ("opd.outputs", "OUTPUTS"), ("opd.recipes", "RECIPES"),
             ("opd.rows", "FIELD_TYPES"), ("opd.rows", "PLACEMENT_FIELDS"), ("opd.rows", "Row"),
             ("opd.dag", "log_path"), ("opd.backends", "CONFIG_CHECKS"), ("opd.spec", "Run"), ("opd.spec", "Experiment")}
    for module, name in cited:
        assert name in TEXT
        assert hasattr(importlib.import_module(module), name), f"{module}.{name}"
    for kind in re.findall(r"`(\w+Spec)`", TEXT):
        assert hasattr(importlib.import_module("opd.spec"), kind), kind
