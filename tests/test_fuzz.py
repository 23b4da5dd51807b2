"""Mutated recipes never produce a traceback: every outcome is a report (exit 0, 1 or 2)."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recipectl.diagnostics import Severity
from recipectl.validate import validate_file

ROOT = Path(__file__).resolve().parent.parent
SEED = yaml.safe_load((ROOT / "recipes" / "gb200" / "qwen3.5-397b-nvfp4-pd.yaml").read_text())

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**9),
    st.floats(allow_nan=True),
    st.text(max_size=12),
    st.lists(st.integers(-5, 9000), max_size=3),
)


def paths(data, prefix=()):
    if isinstance(data, dict):
        for k, v in data.items():
            yield prefix + (k,)
            yield from paths(v, prefix + (k,))


ALL_PATHS = list(paths(SEED))


@st.composite
def mutated(draw):
    data = copy.deepcopy(SEED)
    for _ in range(draw(st.integers(1, 4))):
        path = draw(st.sampled_from(ALL_PATHS))
        parent = data
        for key in path[:-1]:
            if not isinstance(parent, dict) or key not in parent:
                break
            parent = parent[key]
        else:
            if isinstance(parent, dict):
                action = draw(st.sampled_from(["set", "delete", "rename"]))
                if action == "set":
                    parent[path[-1]] = draw(scalars)
                elif action == "delete":
                    parent.pop(path[-1], None)
                elif path[-1] in parent:
                    parent[path[-1] + draw(st.sampled_from(["s", "_", "x"]))] = parent.pop(path[-1])
    return data


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_recipes_are_reported_not_raised(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fuzz") / "r.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    report, _ = validate_file(path)  # must not raise
    for d in report.diagnostics:
        assert d.code and d.message


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_text_is_reported_not_raised(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("fuzz") / "r.yaml"
    path.write_text(text)
    report, recipes = validate_file(path)
    for d in report.diagnostics:
        assert d.code and d.message
    if report.valid:
        assert recipes, "a valid report with no recipe in it"
    else:  # an invalid file says why: at least one error
        assert any(d.severity == Severity.ERROR for d in report.diagnostics), report.diagnostics
