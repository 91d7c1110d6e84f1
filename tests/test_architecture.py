"""docs/architecture.md is true to the code: every file and folder it names exists, every rule file is in its
stages table, every rule it names is defined, and every name it cites from a module is there; and opd's imports
run one way (no loop of any length)."""
import ast
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


def imports_of(path, package: str) -> set[str]:
    """The dotted names a module imports (`from a.b import c` names a.b and a.b.c; relative imports resolved against
    `package`; importlib.import_module of a literal name), at module level and inside functions alike, with every
    package above each (importing a.b.c runs a/__init__.py and a/b/__init__.py). A registry's entries
    (opd.backends.JOBS, CONFIG_CHECKS: modules named in data, imported by name on use) are not imports."""
    named = set()
    for n in ast.walk(ast.parse(path.read_text())):
        if isinstance(n, ast.ImportFrom):
            parts = package.split(".")
            base = ".".join(parts[:len(parts) - (n.level - 1)] + ([n.module] if n.module else [])) if n.level else n.module
            named |= {base} | {f"{base}.{a.name}" for a in n.names}
        elif isinstance(n, ast.Import):
            named |= {a.name for a in n.names}
        elif (isinstance(n, ast.Call) and getattr(n.func, "attr", getattr(n.func, "id", None)) == "import_module"
              and n.args and isinstance(n.args[0], ast.Constant)):  # importlib.import_module("opd.quant")
            named.add(n.args[0].value)
    return named | {".".join(m.split(".")[:k]) for m in named for k in range(1, m.count("."))}


def import_graph() -> dict[str, set[str]]:
    """opd's modules and the opd modules each imports; a module's own packages left out (importing a package's
    module runs the package's __init__ first in any case)."""
    mods = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
            for p in (ROOT / "opd").rglob("*.py")}
    graph = {}
    for m, p in mods.items():
        package = m if p.name == "__init__.py" else m.rsplit(".", 1)[0]
        graph[m] = {d for d in imports_of(p, package) & set(mods) if d != m and not m.startswith(d + ".")}
    return graph


def loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import loops of `graph`: its strongly connected components of more than one module (Tarjan), sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
                on.discard(component[-1])
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def test_the_loop_finder_finds_loops_of_any_length_and_only_loops():
    assert loops({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert loops({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}}) == [["a", "b"], ["c", "d", "e"]]
    assert loops({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def test_the_import_graph_sees_imports_inside_functions_relative_ones_and_packages(tmp_path):
    (tmp_path / "m.py").write_text("def f():\n    from .sub import g\n    from opd.a.b import c\n"
                                   "    return importlib.import_module('opd.q')\n")
    assert imports_of(tmp_path / "m.py", "opd.x") >= {"opd.x.sub", "opd.x.sub.g", "opd.a.b", "opd.a", "opd", "opd.q"}
    graph = import_graph()
    assert "opd.backends.verl.plan" in graph["opd.dag"] and "opd.backends.verl" in graph["opd.dag"]
    assert "opd.stats.bootstrap" in graph["opd.stats.seeds"]


def test_imports_run_one_way():
    """No loop among opd's modules, of any length, counting the imports inside functions: a loop works only as long
    as its imports stay inside functions, and it ties the modules on it into one."""
    assert loops(import_graph()) == []
