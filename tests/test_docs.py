"""The documentation a newcomer reads is true to the code: every command in README.md and docs/*.md runs, or
dry-runs, in a fresh clone; the generated pages (docs/config.md, docs/figures.md) are current; every config
field is described.

How each command of a ```bash block is checked (`check`): `snakemake ...` as a dry run (`-n`) and
`python -m opd...` commands for real, except where HELP says `--help` (commands whose work needs a cluster or
data, and the benchmarks, which take minutes); a few are not run, each for the reason NOT_RUN gives. A block
preceded by `<!-- docs-test: not run (why) -->` is not run. A command matching none of these fails the test:
classify it here, or mark its block. A ```yaml block holding one new row (`- {name: ...}`) is added to the
clone's config first, as the reader adds it."""
import importlib.util
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, edit_config
from opd import docs

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NOT_RUN = {("pip", "install"): "installs packages (the tests run in the environment it makes)",
           ("python", "-m", "pytest"): "the test suite itself",
           ("snakemake", "--report"): "builds the report: tests/test_report.py builds one and checks it in a browser"}
RUN = (("python", "-m", "opd.cli"), ("python", "-m", "opd.docs"), ("python", "-m", "opd.backends.verl", "overrides"))
HELP = (("python", "benchmarks/"), ("python", "-m", "opd.backends.verl"))


def blocks(text: str):
    """(language, marker, body) of every fenced block; marker: the `docs-test:` comment just above it, if any."""
    for m in re.finditer(r"(?:<!--\s*docs-test:\s*(.*?)\s*-->\s*\n)?```(\w*)\n(.*?)```", text, re.S):
        yield m.group(2), m.group(1), m.group(3)


def commands(body: str) -> list[list[str]]:
    """The commands of a bash block: continuation lines joined, comments dropped, `&&` chains split."""
    out = []
    for line in body.replace("\\\n", " ").splitlines():
        tokens = shlex.split(line, comments=True)
        cmd = []
        for t in tokens + ["&&"]:
            if t == "&&":
                if cmd:
                    out.append(cmd)
                cmd = []
            else:
                cmd.append(t)
    return out


def starts(cmd, prefix) -> bool:
    words = [w for w in cmd if "=" not in w or w.startswith("-")]  # PYTHONPATH=. and the like set the environment
    return all(len(words) > i and (words[i] == p or (p.endswith("/") and words[i].startswith(p)))
               for i, p in enumerate(prefix))


OPTIONAL = {"--tensorboard": "tensorboard", "--wandb": "wandb"}  # the export extra's tools, where a command needs one


def how(cmd) -> tuple[str, str]:
    """('skip', why), ('run', ''), ('dry', '') or ('help', '') for one command; ('unknown', ...) otherwise."""
    for prefix, why in NOT_RUN.items():
        if starts(cmd, prefix[:1]) and all(p in cmd for p in prefix[1:]):
            return "skip", why
    missing = [m for flag, m in OPTIONAL.items() if flag in cmd and importlib.util.find_spec(m) is None]
    if missing:
        return "skip", f"needs the optional {', '.join(missing)} (pip install -e '.[export]')"
    if cmd[0] == "snakemake":
        return "dry", ""
    if any(starts(cmd, p) for p in RUN):
        return "run", ""
    if any(starts(cmd, p) for p in HELP):
        return "help", ""
    return "unknown", "classify it in tests/test_docs.py or mark its block"


def documented():
    """(page, command) of every command, in reading order, and the new rows the pages add."""
    cmds, rows = [], []
    for page in PAGES:
        for lang, marker, body in blocks(page.read_text()):
            if lang == "bash" and not marker:
                cmds += [(page.relative_to(ROOT), c) for c in commands(body)]
            elif lang == "yaml":
                parsed = yaml.safe_load(body)
                if isinstance(parsed, list) and len(parsed) == 1 and isinstance(parsed[0], dict) and "name" in parsed[0]:
                    rows.append(parsed[0])
    return cmds, rows


def test_every_documented_command_is_classified():
    cmds, _ = documented()
    assert len(cmds) >= 10
    unknown = [f"{page}: {' '.join(c)}" for page, c in cmds if how(c)[0] == "unknown"]
    assert not unknown, "commands the docs test does not know how to check:\n" + "\n".join(unknown)


def test_every_documented_command_runs_in_a_fresh_clone(fresh_clone):
    cmds, rows = documented()
    clone = fresh_clone
    toy = yaml.safe_load((clone / "config.yaml").read_text())["experiments"]["toy"]["rows"]
    new = [r for r in rows if r["name"] not in {x["name"] for x in toy}]
    edit_config(clone, lambda c: c["experiments"]["toy"]["rows"].extend(new))
    failures, done = [], []
    for page, cmd in cmds:
        kind, why = how(cmd)
        if kind == "skip":
            continue
        env_words = [w for w in cmd if "=" in w and not w.startswith("-") and cmd.index(w) == 0]
        argv = cmd[len(env_words):]
        argv = [sys.executable, *argv[1:]] if argv[0] == "python" else [sys.executable, "-m", "snakemake", *argv[1:]] \
            if argv[0] == "snakemake" else argv
        if kind == "dry":
            argv = argv + ["-n"]
        elif kind == "help":
            script = next((a for a in argv if a.endswith(".py")), None)
            if script and "argparse" not in (clone / script).read_text():
                argv = [sys.executable, "-m", "py_compile", script]  # no options to show: compile it
            else:
                argv = argv[:argv.index(script) + 1 if script else 4] + ["--help"]
        env = dict(__import__("os").environ, **dict(w.split("=", 1) for w in env_words))
        r = subprocess.run(argv, cwd=clone, capture_output=True, text=True, env=env, timeout=600)
        done.append(f"{kind}: {' '.join(cmd)}")
        if r.returncode != 0:
            failures.append(f"{page}: {' '.join(cmd)} ({kind}) exited {r.returncode}:\n{(r.stdout + r.stderr)[-1500:]}")
    print("\n".join(done))
    assert not failures, "\n\n".join(failures)
    assert subprocess.run(["git", "status", "--porcelain", "docs"], cwd=clone, capture_output=True,
                          text=True).stdout == ""  # `python -m opd.docs` found the pages current


def test_generated_pages_are_current():
    for name, make in docs.PAGES.items():
        assert (ROOT / "docs" / name).read_text() == make(), f"docs/{name} is stale: run `python -m opd.docs`"


def test_every_config_field_is_described():
    assert docs.undescribed() == []
    paths = [p for p, _ in docs.fields()]
    for f in ("experiments.<name>.rows[].guard.window", "experiments.<name>.verl.extra_overrides", "highlight",
              "experiments.<name>.students.<name>.d_ff", "slurm.signal_delay_s"):
        assert f in paths


SCHEMA_KEYWORDS = {"type", "description", "enum", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "items",
                   "minItems", "maxItems", "uniqueItems", "properties", "required", "additionalProperties", "$ref",
                   "oneOf", "const", "pattern", "minLength", "maxLength", "minProperties", "propertyNames", "$schema", "$defs"}


def test_the_schema_uses_only_json_schema_keywords():
    """A comma in an unquoted YAML flow-mapping description makes a stray key (and truncates the description)."""
    schema = yaml.safe_load((ROOT / "workflow/schemas/config.schema.yaml").read_text())
    stray = []

    def walk(node, path, names):
        if isinstance(node, dict):
            for k, v in node.items():
                if not names and k not in SCHEMA_KEYWORDS:
                    stray.append(f"{path}/{k}")
                walk(v, f"{path}/{k}", k in ("properties", "$defs") and not names)
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{path}[{i}]", False)
    walk(schema, "", False)
    assert not stray, stray


@pytest.mark.parametrize("body, expected", [
    ("a && b c\n# comment\nd 'e f'  # trailing\n", [["a"], ["b", "c"], ["d", "e f"]]),
    ("x \\\n  --y z\n", [["x", "--y", "z"]]),
])
def test_commands_are_read_as_a_shell_reads_them(body, expected):
    assert commands(body) == expected
