"""Random configs: any mutation of a valid config (drop, add, retype, out-of-range, at every level) is
either accepted or rejected with an error that names the experiment, row and field; never a traceback."""
import copy
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opd import config as C

SHIPPED = C.load()  # the shipped config.yaml, validated once


def paths(obj, prefix=()):
    """Every key path into the config (dicts and lists, all levels)."""
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += paths(v, prefix + (i,))
    return out


PATHS = paths(SHIPPED)[1:]
VALUES = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
                   st.text(max_size=12), st.lists(st.integers(-5, 5), max_size=3),
                   st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))


def parent(cfg, path):
    node = cfg
    for k in path[:-1]:
        node = node[k]
    return node


def mutate(cfg, path, op, value):
    node, key = parent(cfg, path), path[-1]
    if op == "drop":
        del node[key]  # a list item or a dict key
    elif op == "retype":
        node[key] = value
    elif op == "add" and isinstance(node[key], dict):
        node[key]["zz_" + str(value)[:8]] = value
    elif op == "add" and isinstance(node[key], list):
        node[key].append(value)
    elif op == "negate" and isinstance(node[key], (int, float)) and not isinstance(node[key], bool):
        node[key] = -node[key] - 1
    elif op == "huge" and isinstance(node[key], (int, float)) and not isinstance(node[key], bool):
        node[key] = node[key] * 10**9 + 10**9
    return cfg


def names_where(message: str) -> bool:
    return "field '" in message or "config must be a mapping" in message


# Expanding an accepted config into runs plans it from the committed results (opd.plan: about a second, against
# 0.02 s to validate), and most examples are configs an earlier example gave already (a mutation that does nothing,
# as `negate` of a string; about 110 distinct accepted configs in 500): each distinct config is expanded once, its
# outcome (None, or the ConfigError's message) kept for the examples that give it again.
EXPANDED: dict[str, str | None] = {}


def expand(key: str, cfg) -> str | None:
    """None if the validated config expands into runs, else the ConfigError's message (C.runs, once per distinct
    config: `key`, the config as mutated)."""
    if key not in EXPANDED:
        try:
            C.runs(cfg)
            EXPANDED[key] = None
        except C.ConfigError as e:
            EXPANDED[key] = str(e)
    return EXPANDED[key]


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(PATHS), st.sampled_from(["drop", "retype", "add", "negate", "huge"]),
                          VALUES), min_size=1, max_size=3))
def test_mutated_configs_are_accepted_or_named(mutations):
    cfg = copy.deepcopy(SHIPPED)
    for path, op, value in mutations:
        try:
            mutate(cfg, path, op, value)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed or retyped this path's parent
    key = json.dumps(cfg, sort_keys=True, default=repr)  # the config as mutated, before validate reads it
    try:
        C.validate(cfg)
        msg = None
        if isinstance(cfg.get("experiments"), dict) and cfg.get("experiment") in cfg["experiments"]:
            msg = expand(key, cfg)  # an accepted config must also expand into runs
    except C.ConfigError as e:
        msg = str(e)
    if msg is not None:
        lines = msg.splitlines()[1:] or [msg]
        assert all(names_where(line) for line in lines), msg
