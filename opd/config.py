"""config.yaml: validation (JSON schema + cross-field checks) and the matrix of runs.

Every error names the experiment, the row (counted from 1, with its line where the Snakefile passes the config
files: Lines) and the field, and is raised before any job starts. A validated
experiment is read as an opd.spec.Experiment (every default resolved there); a run is one row x one student x
one seed (opd.spec.Run, its id opd.spec.run_id). Validation imports no torch (a test checks it).
"""
from __future__ import annotations

import functools
import math
import sys
from collections.abc import Mapping
from pathlib import Path

import jsonschema
import yaml

from opd import backends
from opd.errors import ConfigError
from opd.rows import FIELD_TYPES, PLACEMENT_FIELDS, Row, mechanism
from opd.spec import Edge, Experiment, Run, Sequential, Settings, Student, draw_of, spec_text

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"


# Bounds on what a config may hold, checked before anything else reads it: the values of the whole config once
# YAML's aliases are expanded (config.yaml holds about 1,000; an alias bomb of a few KB expands to millions),
# and the bytes of one job's spec file (opd.spec.MAX_SPEC_BYTES).
MAX_CONFIG_VALUES = 20_000


def load(path=ROOT / "config.yaml", overrides: dict | None = None) -> dict:
    cfg = read_yaml(path)
    cfg.update(overrides or {})
    validate(cfg, Lines([path], cli={k: None for k in overrides or {}}))  # each replaces its key whole
    return cfg


def read_yaml(path):
    """A config file's contents; a YAML syntax error is a ConfigError naming the file, line and column (Snakemake's
    own reading of a config file says only that it is "not valid JSON or YAML")."""
    try:
        with open(path, encoding="utf-8") as f:
            return yaml.safe_load(f)
    except UnicodeError as e:
        raise ConfigError(f"invalid config: {path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{path} line {mark.line + 1}, column {mark.column + 1}" if mark else str(path)
        context = (f" ({e.context} that starts on line {e.context_mark.line + 1}"
                   f"{': is the indentation as meant?' if 'block' in e.context else ''})"
                   if e.context and e.context_mark else "")
        raise ConfigError(f"invalid config: {where}: YAML syntax: {e.problem or e}{context}") from None


def check_syntax(path) -> None:
    """read_yaml's check of a config file that exists (a missing one is Snakemake's to report: a --configfile
    may stand in for it)."""
    if Path(path).exists():
        read_yaml(path)


def or_exit(check, *args):
    """`check(*args)`, or on a ConfigError exit with its message alone: a config error is the user's to mend,
    not a crash, and Snakemake prints a traceback under an exception raised while it reads the Snakefile."""
    try:
        return check(*args)
    except ConfigError as e:
        sys.exit(str(e))


class Lines:
    """Where a config value was written, for an error to name: `'config.yaml line 121'` for a path of keys and
    indices. `sources` are the config files in the order Snakemake applies them (config.yaml, then each
    --configfile), so the last that holds a path wrote it; a value --config set (`cli`, the mapping Snakemake
    merges over the files) was written on the command line and has no line. A value reached through a YAML
    alias is given its anchor's line."""

    def __init__(self, sources=(), cli=None):
        self.cli = cli or {}
        self.trees = []
        for src in sources:
            try:
                self.trees.append((_shown(src), yaml.compose(Path(src).read_text())))
            except (OSError, UnicodeError, yaml.YAMLError):
                continue

    def __call__(self, *path) -> str:
        if not path or _set_by(self.cli, path):
            return ""
        for name, node in reversed(self.trees):
            for key in path:
                node = _child(node, key)
                if node is None:
                    break
            else:
                return f"{name} line {node.start_mark.line + 1}"
        return ""


def _shown(src) -> str:
    """A config file as an error names it: relative to the working directory where it is below it."""
    p = Path(src).absolute()
    try:
        return str(p.relative_to(Path.cwd()))
    except ValueError:
        return str(p)


def _set_by(cli, path) -> bool:
    """Whether --config's mapping sets the value at `path` or one of its parents (a mapping it gives is merged
    into the files' mapping key by key, so only the keys it names are its own)."""
    node = cli
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return False
        node = node[key]
        if not isinstance(node, Mapping):
            return True
    return False


def _child(node, key):
    if isinstance(node, yaml.MappingNode):
        # the last of duplicate keys, as safe_load keeps it
        return next((v for k, v in reversed(node.value) if k.value == str(key)), None)
    if isinstance(node, yaml.SequenceNode) and isinstance(key, int) and 0 <= key < len(node.value):
        return node.value[key]
    return None


NO_LINES = Lines()


def row_label(exp, i: int, name, lines: Lines = NO_LINES) -> str:
    """How an error names a row: its experiment, its place in the list counted from 1 as an editor counts, its
    name, and the line it starts on where `lines` knows it."""
    line = lines("experiments", exp, "rows", i)
    return f"experiment {_q(exp)}, row {i + 1} ({_q(name)}{', ' + line if line else ''})"


def _q(name) -> str:
    """A name in single quotes whatever it holds (repr would switch to double quotes around a quote);
    a character that would break the error's line (a line break, a control character) is escaped, and a name
    longer than a name may be is cut short."""
    name = str(name)
    name = name if len(name) <= 80 else name[:60] + f"... ({len(name)} characters)"
    return "'" + "".join(c if c.isprintable() else repr(c)[1:-1] for c in name) + "'"


def _where(cfg: dict, path, lines: Lines = NO_LINES) -> str:
    """'experiment 'toy', row 3 ('fp8w', config.yaml line 60), field 'noise_sigma'' from a jsonschema error
    path (the row counted from 1; the line where `lines` knows it: the row's, or the field's outside rows)."""
    p = list(path)
    if len(p) >= 4 and p[0] == "experiments" and p[2] == "rows" and isinstance(p[3], int):
        exp, i = p[1], p[3]
        try:
            name = cfg["experiments"][exp]["rows"][i].get("name", "?")
        except (AttributeError, IndexError, KeyError):
            name = "?"
        field = ".".join(map(str, p[4:])) or "(row)"
        return f"{row_label(exp, i, name, lines)}, field {_q(field)}"
    line = lines(*p)
    at = f" ({line})" if line else ""
    if len(p) >= 2 and p[0] == "experiments":
        return f"experiment {_q(p[1])}, field {_q('.'.join(map(str, p[2:])) or '(experiment)')}{at}"
    return f"field {_q('.'.join(map(str, p)) or '(top level)')}{at}"


def did_you_mean(word, choices) -> str:
    """'; did you mean 'bf16_layers'?' for a misspelt key or value (difflib's close matches), else ''."""
    import difflib
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=3)
    return f"; did you mean {' or '.join(map(_q, close))}?" if close else ""


def _finite(x) -> bool:
    return not isinstance(x, float) or math.isfinite(x)


# JSON schema's types as this project reads them: an integer is an int (1.0 and True are not: a float seed
# would name run `...s1.0`, a float step count fail deep inside training), a number is finite (NaN passes
# every bound, and where a value may be unset NaN reads as unset: `tau: .nan` would turn a fail into a pass).
_TYPES = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine_many({
    "integer": lambda _, x: isinstance(x, int) and not isinstance(x, bool),
    "number": lambda _, x: isinstance(x, (int, float)) and not isinstance(x, bool) and _finite(x)})


@functools.lru_cache(maxsize=1)
def _validator() -> jsonschema.Draft202012Validator:
    cls = jsonschema.validators.extend(jsonschema.Draft202012Validator, type_checker=_TYPES)
    return cls(yaml.safe_load(SCHEMA.read_text()))


def _too_many_values(obj, limit: int = MAX_CONFIG_VALUES) -> bool:
    """Whether `obj` holds more than `limit` values, aliases counted at each use (stops counting past the limit)."""
    n, todo = 0, [obj]
    while todo:
        x = todo.pop()
        n += 1
        if n > limit:
            return True
        if isinstance(x, dict):
            todo += [*x.keys(), *x.values()]
        elif isinstance(x, (list, tuple)):
            todo += x
    return False


def _nonfinite(obj, path=()) -> list[tuple]:
    """The paths of every NaN or infinity in `obj` (a key's value anywhere, typed by the schema or not)."""
    if isinstance(obj, dict):
        return [p for k, v in obj.items() for p in _nonfinite(v, (*path, k))]
    if isinstance(obj, (list, tuple)):
        return [p for i, v in enumerate(obj) for p in _nonfinite(v, (*path, i))]
    return [path] if not _finite(obj) else []


def _non_string_keys(obj, path=()) -> list[tuple]:
    """The paths of every mapping key that is not a string (YAML reads `.nan: ...`, `1: ...` or `true: ...` as a
    number or a boolean): each names a student, row field or setting, which are names."""
    if isinstance(obj, dict):
        return [(*path, k) for k in obj if not isinstance(k, str)] + [
            p for k, v in obj.items() if isinstance(k, str) for p in _non_string_keys(v, (*path, k))]
    if isinstance(obj, (list, tuple)):
        return [p for i, v in enumerate(obj) for p in _non_string_keys(v, (*path, i))]
    return []


def validate(cfg: dict, lines: Lines = NO_LINES) -> None:
    """Raise ConfigError listing every problem; return None when the config is good. `lines` says where each
    value was written (the Snakefile passes config.yaml and every --configfile)."""
    if not isinstance(cfg, dict):
        raise ConfigError("config must be a mapping")
    if _too_many_values(cfg):
        raise ConfigError(f"invalid config: it holds more than {MAX_CONFIG_VALUES:,} values once YAML's aliases "
                          f"(&name, *name) are expanded; config.yaml holds about 1,000")
    keys = _non_string_keys(cfg)
    if keys:  # before anything reads them as names
        raise ConfigError("invalid config:\n  " + "\n  ".join(
            f"{_where(cfg, p[:-1], lines)}: the key {p[-1]!r} is not a name (YAML read it as "
            f"{type(p[-1]).__name__}; quote it, or name it with letters, digits, '_' and '-')" for p in keys))
    validator = _validator()
    errors = [f"{_where(cfg, p, lines)}: {_get(cfg, p)} is not a finite number (NaN and infinity are refused)"
              for p in _nonfinite(cfg)]
    for e in sorted(validator.iter_errors(cfg), key=lambda e: list(map(str, e.absolute_path))):
        if not _finite(e.instance):
            continue  # named above
        errors.append(f"{_where(cfg, e.absolute_path, lines)}: {_message(e)}")
    if not errors:
        errors = cross_field_errors(cfg, lines)
    if errors:
        raise ConfigError("invalid config:\n  " + "\n  ".join(errors))


def _message(e: jsonschema.ValidationError) -> str:
    """A schema error's message as this project words it (names, lengths, unknown keys and enums with the closest
    valid names)."""
    msg = e.message
    if e.validator == "pattern" and e.schema is _validator().schema["$defs"]["name"]:
        msg = (f"{_q(e.instance)} is not a name: letters, digits, '_' and '-' only, starting with a letter "
               f"or digit (no line break)")
    elif e.validator == "maxLength":
        msg = f"{len(e.instance)} characters, more than the {e.validator_value} allowed"
    elif e.validator == "oneOf" and e.context:  # the alternative that got deepest into the value says what is wrong
        msg = max(e.context, key=lambda c: len(c.relative_path)).message
    if e.validator == "additionalProperties":
        known = e.schema.get("properties")
        unknown = [k for k in e.instance if known is not None and k not in known]
        msg = ("; ".join(f"unknown key: {_q(k)}{did_you_mean(k, known)}" for k in unknown) if unknown else
               "unknown key: " + msg.split("(", 1)[-1].rstrip(")").replace(" were unexpected", "").replace(
                   " was unexpected", ""))
    elif e.validator == "enum" and isinstance(e.instance, str):
        msg += did_you_mean(e.instance, e.validator_value)
    return msg


def row_schema_errors(row: dict) -> list[tuple[str, str]]:
    """(field, why) for each way one row (config.yaml's mapping) breaks the schema's row definition: the check a
    configured row passes within the whole config, for the rows an edge makes (adaptive_errors)."""
    v = _validator()
    sub = v.evolve(schema={"$ref": "#/$defs/row", "$defs": v.schema["$defs"]})
    return [(".".join(map(str, e.absolute_path)) or "(row)", _message(e))
            for e in sorted(sub.iter_errors(row), key=lambda e: list(map(str, e.absolute_path)))]


def _get(cfg, path):
    for k in path:
        cfg = cfg[k]
    return cfg


def _case_collisions(names) -> list[tuple[str, str]]:
    """(earlier, later) pairs of names that differ in case only: one folder on a case-insensitive filesystem."""
    seen, out = {}, []
    for n in names:
        if n.lower() in seen and seen[n.lower()] != n:
            out.append((seen[n.lower()], n))
        seen.setdefault(n.lower(), n)
    return out


def cross_field_errors(cfg: dict, lines: Lines = NO_LINES) -> list[str]:
    errors = [f"field 'experiments': experiments {a!r} and {b!r} differ in case only (one folder on a "
              f"case-insensitive filesystem)" for a, b in _case_collisions(cfg["experiments"])]
    if cfg["experiment"] not in cfg["experiments"]:
        errors.append(f"field 'experiment': unknown experiment {cfg['experiment']!r}; "
                      f"known: {sorted(cfg['experiments'])}")
    errors += highlight_errors(cfg)
    for exp, e in cfg["experiments"].items():
        students = e["students"]
        matrix = [Row.of(r) for r in e["rows"]]
        baselines = [r.name for r in matrix if r.baseline]
        if len(baselines) != 1:
            errors.append(f"experiment {exp!r}, field 'rows': exactly one row must have baseline: true, "
                          f"found {len(baselines)} {baselines}")
        if "taus" in e and e["tau"] not in e["taus"]:  # the budget table, the findings and verdict read tau's row
            errors.append(f"experiment {exp!r}, field 'taus': {e['taus']} does not hold tau ({e['tau']}); the budget "
                          f"table reports tau's budget among the others: add it")
        first = next(iter(students))
        errors += [f"experiment {exp!r}, field 'students': students {a!r} and {b!r} differ in case only (one "
                   f"folder on a case-insensitive filesystem)" for a, b in _case_collisions(students)]
        seen = {}
        for i, r in enumerate(matrix):
            where = row_label(exp, i, r.name, lines)
            if r.name.lower() in seen:
                other = matrix[seen[r.name.lower()]].name
                errors.append(f"{where}, field 'name': duplicate of row {seen[r.name.lower()] + 1}" + (
                    "" if other == r.name else f" ({other!r}: names that differ in case only are one folder on "
                                               f"a case-insensitive filesystem)"))
            seen.setdefault(r.name.lower(), i)
            errors += [f"{where}, field {f!r}: {why}" for f, why in row_errors(r, matrix, e)]
        t = e.get("train", {})
        window = e.get("infra", {}).get("window")
        if window and not (0 <= window[0] < min(window[1], t.get("steps", window[1]))):
            errors.append(f"experiment {exp!r}, field 'infra.window': {window} holds no training step of "
                          f"the {t.get('steps')} run")
        verl_only = [k for k in Settings.VERL_ONLY if k in t]
        if e.get("backend") == "tiny" and verl_only:
            errors.append(f"experiment {exp!r}, field 'train.{verl_only[0]}': a verl setting; the tiny backend's "
                          f"task fixes its prompt and response lengths and samples at temperature 1")
        if e.get("backend") == "verl":
            errors += [f"experiment {exp!r}, field 'train.{k}': the verl backend needs it" for k in Settings.VERL_ONLY
                       if k not in t]
        for name, st in students.items():
            missing = [k for k in Student.of(st).needs(e.get("backend")) if k not in st]
            if missing:
                errors.append(f"experiment {exp!r}, field 'students.{name}.{missing[0]}': the {e['backend']} backend "
                              f"needs it")
            errors += [f"experiment {exp!r}, field 'students.{name}.{f}': {why}"
                       for f, why in converge_errors(st, e.get("backend"))]
        if e.get("backend") != "tiny" and e.get("base_draws", 1) > 1:
            errors.append(f"experiment {exp!r}, field 'base_draws': the {e.get('backend')} backend's base models are "
                          f"the checkpoints the config names, one per student; only the tiny backend trains (and so "
                          f"redraws) its own")
        if e.get("frozen_rules") and not e.get("predictors", True):
            errors.append(f"experiment {exp!r}, field 'frozen_rules': they are scored on the predictor study's "
                          f"step-0 statistics, which `predictors: false` turns off")
        if e.get("backend") == "verl" and "data" not in e.get("verl", {}):
            errors.append(f"experiment {exp!r}, field 'verl.data': the verl backend needs it (the training and "
                          f"held-out prompts)")
        for i, field, why in backends.config_errors(cfg, exp):  # the backend's own (opd.backends.CONFIG_CHECKS)
            errors.append(f"experiment {exp!r}, field {field!r}: {why}" if i is None else
                          f"{row_label(exp, i, e['rows'][i]['name'], lines)}, field {field!r}: {e['backend']} backend: "
                          f"{why}")
        if matrix and len(baselines) == 1:
            errors += adaptive_errors(exp, e, matrix, lines, cfg)
        errors += frozen_rules_errors(exp, e, matrix)
        if matrix and baselines:
            base = next(r for r in matrix if r.baseline)
            missing = set(students) - set(base.students_or(first))
            if missing and any(set(r.students or ()) & missing for r in matrix):
                errors.append(f"{row_label(exp, matrix.index(base), base.name, lines)}, field 'students': the "
                              f"baseline must cover every student other rows use; missing {sorted(missing)}")
    return errors


def row_errors(r: Row, matrix: list[Row], e: dict) -> list[tuple[str, str]]:
    """(field, why) for each cross-field problem of one row of experiment `e` (config.yaml's mapping), `matrix` its
    rows: the checks every row passes, a configured one or an edge's (adaptive_errors)."""
    students, first = e["students"], next(iter(e["students"]))
    out = []
    for s in r.students or ():
        if s not in students:
            out.append(("students", f"unknown student {s!r}; known: {sorted(students)}"))
    for s in r.students_or(first):
        n = students.get(s, {}).get("layers")
        for layer in r.bf16_layers:
            if n is not None and not -n <= layer < n:
                out.append(("bf16_layers", f"layer {layer} out of range for student {s!r} with {n} layers"))
        if n is not None and len({i % n for i in r.bf16_layers}) >= n:
            out.append(("bf16_layers", f"keeps every layer of student {s!r} in BF16, so the row quantizes nothing"))
    if r.reference is not None:
        target = next((x for x in matrix if x.name == r.reference), None)
        if target is None or r.reference == r.name:
            out.append(("reference", f"{r.reference!r} is not another row of the experiment"))
        elif target.algorithm != "opd":
            out.append(("reference", f"{r.reference!r} is an RL row; Δ compares OPD runs"))
        else:
            missing = set(r.students_or(first)) - set(target.students_or(first))
            if missing:
                out.append(("reference", f"row {r.reference!r} does not run student(s) {sorted(missing)}, so there "
                                         f"is nothing to compare with"))
    out += [(f"guard.{f}", why) for f, why in guard_errors(r, e.get("train", {}))]
    out += [("seeds", why) for why in draw_errors(r, matrix, e)]
    if r.noise_redraw and not r.noise_sigma:
        out.append(("noise_redraw", "redraws the noise direction but the row has no noise_sigma"))
    if r.bf16_layers and not r.quantizes:
        out.append(("bf16_layers", "keeps layers in BF16 but the row quantizes nothing"))
    if "quant_alpha" in r.given and not r.quantizes:
        out.append(("quant_alpha", "scales the row's quantization error (x_bf16 + quant_alpha (Q(x) - x_bf16)), but "
                                   "the row quantizes nothing" + (" (noise_sigma is weight noise, not a quantization)"
                                                          if r.noise_sigma else "")
                    + "; give it weights, activations or kv_cache"))
    return out


def converge_errors(st: dict, backend: str) -> list[tuple[str, str]]:
    """(field, why) for a student's converged recipe (`converge:`, opd.spec.Converge): tiny only; it picks the student
    itself, so student_steps is refused beside it; the teacher can stop only on an evaluation at or after
    teacher_steps and at max_steps, and the student is scanned on the checkpoints inside each evaluation interval."""
    c = st.get("converge")
    if c is None:
        return []
    if backend != "tiny":
        return [("converge", f"the {backend} backend's base models are the checkpoints the config names; only the "
                             f"tiny backend trains its own")]
    out = []
    if "student_steps" in st:
        out.append(("student_steps", "the converged recipe (converge) picks the student by its held-out KL to the "
                                     "teacher; remove student_steps"))
    if c["max_steps"] < st.get("teacher_steps", 0):
        out.append(("converge.max_steps", f"{c['max_steps']} is below teacher_steps ({st['teacher_steps']}), the step "
                                          f"from which the plateau is checked"))
    if c["max_steps"] % c["eval_every"]:
        out.append(("converge.max_steps", f"{c['max_steps']} is not a multiple of eval_every ({c['eval_every']}): "
                                          f"the teacher is always an evaluated step"))
    if c["eval_every"] % c["save_every"]:
        out.append(("converge.save_every", f"{c['save_every']} does not divide eval_every ({c['eval_every']}): the "
                                           f"student is scanned on the checkpoints of each evaluation interval"))
    return out


def frozen_rules_errors(exp: str, e: dict, matrix: list[Row]) -> list[str]:
    """The frozen admission rules' checks: names unique; each a step-0 statistic the tiny backend measures, one
    cut, and no row it was fitted on that is in the matrix but cannot be an admission candidate (the baseline, a
    staleness row, a row outside the budget). A student or row the matrix no longer holds, or a row that no longer
    names the student, is history: the rule was fitted on it once (a trimmed matrix, a removed row), and the record
    counts only what is there."""
    from opd.stats import PREDICTORS
    errors, seen = [], set()
    for i, f in enumerate(e.get("frozen_rules") or ()):
        where = f"experiment {exp!r}, field 'frozen_rules[{i}]"
        if f["name"] in seen:
            errors.append(f"{where}.name': {f['name']!r} names an earlier rule too; each rule needs its own name")
        seen.add(f["name"])
        if e.get("backend") != "tiny":
            errors.append(f"{where}': the step-0 statistics it decides on are measured on the tiny backend only")
        if f["statistic"] not in PREDICTORS:
            errors.append(f"{where}.statistic': {f['statistic']!r} is not a step-0 statistic; known: "
                          f"{sorted(PREDICTORS)}")
        if ("at_most" in f) == ("at_least" in f):
            errors.append(f"{where}': give exactly one of at_most (admit at or below) and at_least (admit at or "
                          f"above)")
        rows = {r.name: r for r in matrix}
        for student, names in f["fitted_on"].items():
            for name in names:
                r = rows.get(name)
                if r is not None and not r.is_admission_candidate:
                    errors.append(f"{where}.fitted_on.{student}': row {name!r} is not an admission candidate of "
                                  f"{student!r} (an engine row other than the baseline, without staleness)")
    return errors


def adaptive_errors(exp: str, e: dict, matrix: list[Row], lines: Lines = NO_LINES, cfg: dict | None = None) -> list[str]:
    """The adaptive design's checks (opd.plan): `seeds: sequential` rows and `edges` against the experiment's
    `sequential` rule, its baseline and its students; each edge's dial, bracket and fixed fields (edge_errors; with
    `cfg`, the backend's checks of its rows too)."""
    from opd.stats import sequential_problem
    errors = []
    first = next(iter(e["students"]))
    base = next(r for r in matrix if r.baseline)
    referenced = {r.reference for r in matrix if r.reference}
    rule = e.get("sequential")
    if rule is not None:
        seq = Sequential.of(rule)
        if seq.near_edge_seeds is not None and not seq.start_seeds <= seq.near_edge_seeds <= seq.max_seeds:
            errors.append(f"experiment {exp!r}, field 'sequential.near_edge_seeds': {seq.near_edge_seeds} is not "
                          f"between start_seeds ({seq.start_seeds}) and max_seeds ({seq.max_seeds})")
    for i, r in enumerate(matrix):
        if not r.sequential:
            continue
        where = f"{row_label(exp, i, r.name, lines)}, field 'seeds'"
        if rule is None:
            errors.append(f"{where}: `sequential` needs the experiment's `sequential` rule (max_seeds at least)")
        if r.baseline or r.name in referenced:
            errors.append(f"{where}: the {'baseline' if r.baseline else 'reference of another row'} runs its full "
                          f"design (every comparison with it shares its seeds), so it cannot be sequential")
        if r.algorithm != "opd":
            errors.append(f"{where}: an RL row has no Δ verdict for the sequential rule to decide; give it seeds")
        ref = next((x for x in matrix if x.name == r.reference), base) if r.reference else base
        if ref.sequential and ref is not r:
            errors.append(f"{where}: its reference {r.reference!r} is sequential")
        elif rule is not None and not ref.sequential:
            seq = Sequential.of(rule)
            problem = sequential_problem(seq.start_seeds, seq.max_seeds, len(ref.seeds or e["seeds"]),
                                         e.get("base_draws", 1))
            if problem:
                errors.append(f"{where}: against {ref.name!r}: {problem} (field 'sequential.start_seeds')")
    names = {r.name.lower() for r in matrix}
    seen = set()
    for i, x in enumerate(e.get("edges", ())):
        where = f"experiment {exp!r}, edge {i + 1} ({x['name']!r})"
        lo, hi = x["bracket"]
        if not lo < hi:
            errors.append(f"{where}, field 'bracket': needs lo < hi, got {x['bracket']}")
        if x["name"].lower() in names or x["name"].lower() in seen:
            errors.append(f"{where}, field 'name': already the name of a {'row' if x['name'].lower() in names else 'edge'}")
        seen.add(x["name"].lower())
        clash = sorted(r.name for r in matrix if r.name.lower().startswith(x["name"].lower() + "-"))
        if clash:
            errors.append(f"{where}, field 'name': its rows are named {x['name']}-<value>, as are row(s) {clash}")
        if len(x["name"]) > 50:
            errors.append(f"{where}, field 'name': at most 50 characters (its rows add -<value>)")
        seq = Sequential.of(rule) if rule is not None else None
        n_seeds = seq.start_seeds if seq else len(e["seeds"])  # what each value runs first
        problem = sequential_problem(n_seeds, seq.max_seeds if seq else n_seeds, len(base.seeds or e["seeds"]),
                                     e.get("base_draws", 1))
        if problem:
            errors.append(f"{where}: against the baseline {base.name!r}: {problem} (field "
                          f"{'sequential.start_seeds' if seq else 'seeds'!r})")
        for st in x["students"]:
            if st not in e["students"]:
                errors.append(f"{where}, field 'students': unknown student {st!r}; known: {sorted(e['students'])}")
            elif st not in base.students_or(first):
                errors.append(f"{where}, field 'students': the baseline {base.name!r} does not run {st!r}, so its "
                              f"values have nothing to be compared with")
        if lo < hi:
            errors += [f"{where}, field {f!r}: {why}" for f, why in edge_errors(exp, e, x, matrix, cfg)]
    return errors


def edge_errors(exp: str, e: dict, x: dict, matrix: list[Row], cfg: dict | None = None) -> list[tuple[str, str]]:
    """(field, why) for one edge's dial (opd.plan.DIALS: an integer dial's bracket is integers; the bracket inside the
    dial's range) and its `fixed` fields (row fields other than its own field and the placement fields). Its rows at
    the bracket's two ends, built as the plan builds them (opd.plan.edge_fields), then pass the checks a configured
    row passes: the schema's row definition, row_errors (a quant_alpha edge names a quantization: Row.quantizes),
    being a budget row (plain OPD, the experiment's own settings: an edge bisects a budget) and, with `cfg`, the
    backend's (opd.backends.CONFIG_CHECKS); and they lie on a dial (opd.rows.mechanism), as opd.stats.edges needs
    to find the edge. A problem of a fixed field is named `fixed.<field>`, of the edge's own field `bracket`, but a
    cross-field one (row_errors) of the edge's own field and being on no dial `fixed`."""
    from opd import plan as P
    field, fixed = x["field"], x.get("fixed") or {}
    dial = P.DIALS[field]
    out = []
    if dial.integer and not all(isinstance(v, int) and not isinstance(v, bool) for v in x["bracket"]):
        out.append(("bracket", f"{x['bracket']}: {field} is an integer dial, so the bracket's ends are integers"))
    elif not all(dial.inside(v) for v in x["bracket"]):
        out.append(("bracket", f"{x['bracket']} leaves {field}'s range, {dial.span}"))
    computed = [k for k in FIELD_TYPES if k not in ("name", *PLACEMENT_FIELDS)]
    for k in fixed:
        if k == field:
            out.append((f"fixed.{k}", "the edge's own field: the bisection chooses its values"))
        elif k == "name" or k in PLACEMENT_FIELDS:
            out.append((f"fixed.{k}", "says where or how a row runs, not what it computes: an edge's rows are named "
                                      "<edge>-<value>, run the edge's students and its seeds, against the baseline"))
        elif k not in FIELD_TYPES:
            out.append((f"fixed.{k}", f"not a row field{did_you_mean(k, computed)}"))
    if out:
        return out
    edge = Edge.of(x)

    def named(f):
        return f"fixed.{f}" if f in fixed else "bracket" if f == field else f
    found, rows, clean = [], [], []  # (field, why, value) of each end's row; the rows that passed, (value, mapping);
    # those with no problem at all, (value, Row)
    ends = list(dict.fromkeys(dial.snap(b) for b in x["bracket"]))
    for v in ends:
        d = P.edge_fields(edge, [s for s in x["students"] if s in e["students"]], v, "sequential" in e)
        bad = row_schema_errors(d)
        found += [(named(f.split(".")[0]), why, v) for f, why in bad]
        if bad:
            continue
        r = Row.of(d)
        # a cross-field problem of the edge's own field lies with what `fixed` sets beside it (a quant_alpha edge
        # that fixes no quantization: Row.quantizes), not with the bracket's values
        errors = [(named(f.split(".")[0]), why) if f != field else ("fixed", f"{field} {why}")
                  for f, why in row_errors(r, matrix, e)]
        found += [(f, why, v) for f, why in errors]
        if not r.in_budget:
            found.append((named(next((k for k in ("algorithm", "variant", "guard", "lr") if k in fixed), "fixed")),
                          "an edge bisects a budget, so its rows are plain OPD engines with the experiment's own "
                          "training settings (no RL algorithm, update variant, guard or lr of their own)", v))
            continue
        rows.append((v, d))
        if not errors:
            clean.append((v, r))
    # each end's row on the edge's dial, as opd.stats.edges finds it (opd.rows.mechanism), or edges.parquet would
    # leave out every row the plan trains for the edge
    ends_rows = [r for _, r in clean]
    for v, r in clean:
        if mechanism(r, ends_rows) is None:
            found.append(("fixed", f"{field} with {', '.join(f'{k} = {y}' for k, y in fixed.items()) or 'nothing'} "
                                   f"would put its rows on no dial (opd.rows.mechanism: one dial turns noise, "
                                   f"staleness or a quantization alone, without BF16 layers or speculative decoding), "
                                   f"so edges.parquet would leave out every row the plan trains for it", v))
    if cfg is not None and rows:  # the backend's checks, as of the configured rows (each end's row alone)
        sub = {**cfg, "experiments": {**cfg["experiments"], exp: {**e, "rows": [d for _, d in rows]}}}
        found += [(named(f.split(".")[0]), f"{e['backend']} backend: {why}", rows[i][0])
                  for i, f, why in backends.config_errors(sub, exp) if i is not None]
    # a problem of every end's row is said once; one of some ends names the value of each
    for f, why in dict.fromkeys((f, why) for f, why, _ in found):
        at = [v for g, w, v in found if (g, w) == (f, why)]
        out.append((f, why if len(set(at)) == len(ends) else
                    f"{why} (its row at {field} = {', '.join(f'{v:g}' for v in dict.fromkeys(at))})"))
    return out


def highlighted(cfg: dict) -> tuple[str, ...]:
    """The rows `highlight` names (a row name or a list): the budget figure names them."""
    h = cfg.get("highlight") or ()
    return (h,) if isinstance(h, str) else tuple(h)


def draw_errors(row: Row, matrix: list[Row], e: dict) -> list[str]:
    """With base-model draws (`base_draws`), an OPD row with fixed seeds is compared with its reference on the
    draws its seeds use (run seed s on draw s % base_draws): the reference (the baseline unless the row names
    another) must have runs on each of them."""
    n = e.get("base_draws", 1)
    if n <= 1 or row.sequential or row.algorithm != "opd" or row.baseline:
        return []
    ref = next((x for x in matrix if x.name == row.reference), None) if row.reference else \
        next((x for x in matrix if x.baseline), None)
    if ref is None or ref.sequential:
        return []
    have = {draw_of(s, n) for s in (ref.seeds or e["seeds"])}
    missing = sorted({draw_of(s, n) for s in (row.seeds or e["seeds"])} - have)
    if not missing:
        return []
    return [f"its seeds run on base-model draw(s) {missing} (seed % base_draws = {n}), where its reference "
            f"{ref.name!r} has no run; give the reference a seed on each (seeds {missing} would do)"]


def highlight_errors(cfg: dict) -> list[str]:
    """A `highlight` that names no row of the selected experiment, with the closest row names."""
    if cfg.get("experiment") not in cfg.get("experiments", {}):
        return []
    names = [r["name"] for r in cfg["experiments"][cfg["experiment"]]["rows"]]
    return [f"field 'highlight': experiment {cfg['experiment']!r} has no row {h!r}{did_you_mean(h, names)}"
            for h in highlighted(cfg) if h not in names]


def guard_errors(row: Row, train: dict) -> list[tuple[str, str]]:
    """(field, why) for a row's guard that could never act or would act on nothing."""
    g = row.guard
    if g is None:
        return []
    out = []
    if row.baseline or row.is_standard_engine:
        out.append(("action", "the row's engine is the standard engine already; there is nothing to fall back from"))
    elif g.action == "sync" and row.staleness == 0:
        out.append(("action", "'sync' sets staleness to 0, but the row is synchronous already; use 'fallback' or "
                              "'fallback_numerics'"))
    elif g.action == "fallback_numerics" and row.has_standard_numerics:
        out.append(("action", "'fallback_numerics' switches to BF16 numerics, but the row's numerics are BF16 "
                              "already; use 'sync' or 'fallback'"))
    if g.flush and row.staleness == 0:
        out.append(("flush", "the row is synchronous (staleness 0): no batch is in flight to discard"))
    if g.reject and g.window != 1:
        out.append(("reject", f"rejects the batch that crosses d_max, but with window {g.window} the line is on a "
                              f"mean of {g.window} steps, not on one batch: reject needs window 1"))
    if g.reject and row.staleness > 0 and not g.flush:
        out.append(("reject", f"on a stale row (staleness {row.staleness}) the batches sampled after the rejected one "
                              f"are inside its span and are discarded with it: set flush: true too"))
    steps = train.get("steps")
    if isinstance(steps, int) and g.window > steps:
        out.append(("window", f"{g.window} steps is longer than the {steps}-step run, so the guard never watches"))
    return out


def runs(cfg: dict, experiment: str | None = None) -> list[Run]:
    """Every run of an experiment of a validated config (opd.spec.Experiment.runs), planned from the results under
    results/<experiment> where the design is adaptive (opd.plan.experiment)."""
    from opd import plan
    return plan.experiment(cfg, experiment).runs()


def rows(cfg: dict, experiment: str | None = None) -> list[Row]:
    """An experiment's rows, each built once."""
    return [Row.of(r) for r in cfg["experiments"][experiment or cfg["experiment"]]["rows"]]


def write_if_changed(path, spec: dict) -> str:
    """Write canonical JSON (spec_text) to path unless the file already holds exactly that; return the path. Its
    mtime then changes only when its content does. For the files a DAG keeps beside its jobs under .snakemake/opd/
    (the launcher, the admission line): job specs are written by their rule (opd.dag.prepare_job)."""
    from opd import store
    text = spec_text(spec, path)
    p = Path(path)
    if not p.exists() or p.read_text() != text:
        store.atomic_write(p, lambda tmp: Path(tmp).write_text(text))
    return str(path)
