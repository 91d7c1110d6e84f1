"""The documentation a newcomer reads is true to the code: README command 1 works in a fresh venv and a fresh clone,
trains nothing and says little (at most FIRST_LINES lines, ending with the run's summary); every other command in
README.md runs after it alone in that venv, and every command of docs/*.md runs, or dry-runs, in the clone; the
generated pages (docs/config.md, docs/figures.md) are current; every config field is described.

How each command of a ```bash block is checked (`how`): `snakemake ...` as a dry run (`-n`), except the report and
the offline measurements' targets, which run for real (seconds each; a measurement's last line is its decision), and
`python -m opd...` commands for real, except where HELP says `--help` (commands whose work needs a cluster or
data, and the benchmarks, which take minutes); a few are not run, each for the reason NOT_RUN gives. A block
preceded by `<!-- docs-test: not run (why) -->` is not run. A command matching none of these fails the test:
classify it here, or mark its block. A ```yaml block holding one new row (`- {name: ...}`) is added to the
clone's config after README command 1, as the reader adds it. README commands run in the fresh venv, except those
of a block that installs an extra first and those that need an optional tool; docs/*.md commands in this one."""
import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, edit_config
from opd import docs, summary

README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
NOT_RUN = {("pip", "install"): "installs packages (README command 1's install runs, in a fresh venv)",
           ("python", "-m", "pytest"): "the test suite itself"}
FIRST_LINES = 100  # what README command 1 may print, training nothing (its install's lines aside)
MEASUREMENT = re.compile(r"results/[^/]+/(admission|predictors)/([^/]+)\.parquet$")  # a target that decides
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
        return ("real", "") if "--report" in cmd or decides(cmd) else ("dry", "")
    if any(starts(cmd, p) for p in RUN):
        return "run", ""
    if any(starts(cmd, p) for p in HELP):
        return "help", ""
    return "unknown", "classify it in tests/test_docs.py or mark its block"


def decides(cmd):
    """A snakemake command's offline-measurement target (MEASUREMENT's match), or None."""
    return next((m for a in cmd if (m := MEASUREMENT.search(a))), None)


def documented(venv=False):
    """(page, command) of every command, in reading order, and the new rows the pages add. With `venv`: (page,
    command, whether it runs in README command 1's venv - a README command outside a block that installs an extra,
    needing no optional tool - and how many of the rows the reader has added by then)."""
    cmds, rows = [], []
    for page in PAGES:
        for lang, marker, body in blocks(page.read_text()):
            if lang == "bash" and not marker:
                block = commands(body)
                extra = any(starts(c, ("pip", "install")) and "[" in " ".join(c) for c in block)
                cmds += [(page.relative_to(ROOT), c, page == README and not extra and not set(OPTIONAL) & set(c),
                          len(rows)) if venv else (page.relative_to(ROOT), c) for c in block]
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


def test_readme_command_1_in_a_fresh_venv_then_every_documented_command(tmp_path, fresh_clone):
    cmds, rows = documented(venv=True)
    clone = fresh_clone
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True)
    fresh = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    fresh["PATH"] = f"{tmp_path / 'venv' / 'bin'}{os.pathsep}{fresh['PATH']}"
    install, first = cmds[0][1], cmds[1][1]  # README command 1: `pip install ... -e . && snakemake -c 2`
    assert (install[:2], first) == (["pip", "install"], ["snakemake", "-c", "2"]), (install, first)
    r = subprocess.run(install, cwd=clone, env=fresh, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    r = subprocess.run(first, cwd=clone, env=fresh, capture_output=True, text=True, timeout=1200)
    said = (r.stdout + r.stderr).splitlines()
    assert r.returncode == 0, "\n".join(said[-60:])
    # trains nothing, leaves every committed file as it was, and says little: its summary last
    assert len(said) <= FIRST_LINES, f"{len(said)} lines:\n" + "\n".join(said)
    end = max(i for i, line in enumerate(said) if line.startswith("done in "))
    assert len(said) - end <= summary.MAX_LINES and "no run trained" in said[end], "\n".join(said)
    assert subprocess.run(["git", "status", "--porcelain", "results", "figures"], cwd=clone, capture_output=True,
                          text=True).stdout == ""
    cfg = yaml.safe_load((clone / "config.yaml").read_text())
    default = cfg["experiment"]  # what README command 1 built: the rows a reader adds go to it
    there = {x["name"] for x in cfg["experiments"][default]["rows"]}
    failures, done, added = [], [], 0
    for page, cmd, in_venv, n_rows in cmds:
        new = [r for r in rows[added:n_rows] if r["name"] not in there]  # the rows the reader has added by now
        if new:
            edit_config(clone, lambda c: c["experiments"][default]["rows"].extend(new))
        added = n_rows
        kind, why = how(cmd)
        if kind == "skip":
            continue
        env_words = [w for w in cmd if "=" in w and not w.startswith("-") and cmd.index(w) == 0]
        argv = cmd[len(env_words):]
        if not in_venv:  # this environment's Python and Snakemake, with the extras the command's block installs
            argv = [sys.executable, *argv[1:]] if argv[0] == "python" else \
                [sys.executable, "-m", "snakemake", *argv[1:]] if argv[0] == "snakemake" else argv
        if kind == "dry":
            argv = argv + ["-n"]
        elif kind == "help":
            script = next((a for a in argv if a.endswith(".py")), None)
            if script and "argparse" not in (clone / script).read_text():
                argv = [argv[0], "-m", "py_compile", script]  # no options to show: compile it
            else:
                argv = argv[:argv.index(script) + 1 if script else 4] + ["--help"]
        env = dict(fresh if in_venv else os.environ, **dict(w.split("=", 1) for w in env_words))
        r = subprocess.run(argv, cwd=clone, capture_output=True, text=True, env=env, timeout=600)
        done.append(f"{kind}{' (fresh venv)' if in_venv else ''}: {' '.join(cmd)}")
        out = (r.stdout + r.stderr).splitlines()
        if r.returncode != 0:
            failures.append(f"{page}: {' '.join(cmd)} ({kind}) exited {r.returncode}:\n" + "\n".join(out[-30:]))
        elif kind == "real" and decides(cmd):  # an offline measurement's command ends with its decision
            m = decides(cmd)
            if not (out[-1].startswith(f"{m.group(1)} {m.group(2)}: ") and re.search(r"\b(admit|reject)\b", out[-1])):
                failures.append(f"{page}: {' '.join(cmd)} does not end with its decision:\n" + "\n".join(out[-12:]))
    print("\n".join(done))
    assert not failures, "\n\n".join(failures)
    assert (clone / "figures" / default / "report.html").stat().st_size > 0  # README's `snakemake --report`
    assert subprocess.run(["git", "status", "--porcelain", "docs"], cwd=clone, capture_output=True,
                          text=True).stdout == ""  # `python -m opd.docs` found the pages current


def test_generated_pages_are_current():
    for name, make in docs.PAGES.items():
        assert (ROOT / "docs" / name).read_text() == make(), f"docs/{name} is stale: run `python -m opd.docs`"
    text = README.read_text()
    assert docs.fill_blocks(text) == text, "README.md's generated blocks are stale: run `python -m opd.docs`"


def test_readme_says_what_the_toy_finds_in_three_sentences_from_its_outputs():
    """README's "What the toy finds" is exactly three sentences, written by `python -m opd.docs` from the committed
    analysis files: the redrawn-noise finding, the claims by verdict, the guard and the link to findings.md."""
    text = README.read_text()
    begin = docs.BEGIN.format(name="toy-finds", source=docs.BLOCKS["toy-finds"][1])
    block = text[text.index(begin) + len(begin):text.index(docs.END.format(name="toy-finds"))].strip()
    assert block == docs.toy_finds() and "\n" not in block
    sentences = re.split(r"(?<=[.!?])\s+(?=[A-Z\[])", block)
    assert len(sentences) == 3, sentences
    assert "persistence" in sentences[0] and "disagrees with" in sentences[1] and "findings.md" in sentences[2]
    assert text.index("## What the toy finds") < text.index("## Set-up")


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
