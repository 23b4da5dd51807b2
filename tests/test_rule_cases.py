"""Every rule against its cases (tests/rule_cases/*.yaml): a recipe that triggers it and one that
does not. The cases are data; this file only runs them."""

from __future__ import annotations

import copy
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

from recipectl.loader import load_text
from recipectl.rules import all_rules, check_recipe

CASES_DIR = Path(__file__).parent / "rule_cases"
FIXTURES = Path(__file__).parent / "fixtures"
BASES = yaml.safe_load((CASES_DIR / "_bases.yaml").read_text())


def merge(base: dict, patch: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def load_cases() -> list[dict]:
    cases = []
    for f in sorted(CASES_DIR.glob("*.yaml")):
        if f.name.startswith("_"):
            continue
        for case in yaml.safe_load(f.read_text()):
            case["file"] = f.name
            cases.append(case)
    return cases


CASES = load_cases()


def recipe_text(case: dict) -> str:
    data = merge(BASES[case["base"]], case.get("patch") or {})
    text = yaml.safe_dump(data, sort_keys=False)
    return text.replace("{fixtures}", str(FIXTURES))


@pytest.mark.parametrize("case", CASES, ids=[f"{c['rule']}-{c['name']}" for c in CASES])
def test_rule_case(case):
    result = load_text(recipe_text(case), f"{case['rule']}.yaml")
    assert result.ok, [str(d) for d in result.diagnostics]
    (loaded,) = result.recipes
    found = check_recipe(loaded, select={case["rule"]})
    assert sorted(d.path for d in found) == sorted(case["expect"]), [d.message for d in found]
    for d in found:
        assert d.fix, f"{d.code} finding without a fix"
        assert d.line is not None, f"{d.code} finding without a file position"
    if case.get("severity"):  # every finding: a rule's severity can follow the evidence (version, host)
        assert {d.severity.value for d in found} == {case["severity"]}, [d.message for d in found]
    for d in found:  # what every finding says, and its fix, where the case names a part of them
        assert case.get("message", "") in d.message, d.message
        assert case.get("fix", "") in d.fix, d.fix


@pytest.mark.parametrize("base", sorted(BASES))
def test_bases_are_clean_under_every_rule(base):
    text = yaml.safe_dump(BASES[base], sort_keys=False)
    result = load_text(text, f"{base}.yaml")
    assert result.ok
    findings = [
        f"{d.code} {d.path}: {d.message}"
        for d in check_recipe(result.recipes[0])
        if not (base == "cpu" and d.code == "HYB001")
    ]
    assert findings == []


def test_every_rule_has_a_triggering_and_a_clean_case():
    kinds = defaultdict(set)
    for c in CASES:
        kinds[c["rule"]].add("trigger" if c["expect"] else "clean")
    missing = {
        r.code: sorted({"trigger", "clean"} - kinds[r.code])
        for r in all_rules()
        if kinds[r.code] != {"trigger", "clean"}
    }
    assert missing == {}


def test_cases_name_registered_rules():
    codes = {r.code for r in all_rules()}
    assert {c["rule"] for c in CASES} <= codes
