"""`recipectl validate --format sarif`: the reports as one SARIF 2.1.0 log.

One run; its driver lists every rule (code, name, title, the rule's page as help, default level,
category) and the schema's own codes; each finding is a result at its file, line and column, with
the dotted field as a logical location and the fix in its properties. With --show-ignored, an
ignored finding is a result with a suppression (`inSource`: the recipe's `ignore:`; `external`: --ignore or a config
file) whose justification is the reason. tests/test_output_formats.py checks the output against
the SARIF 2.1.0 JSON schema. docs/json-output.md describes it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

from . import __version__
from .diagnostics import Diagnostic, FileReport, sorted_diagnostics
from .ruledocs import rule_page
from .rules.catalog import all_rules

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
LEVELS = {"error": "error", "warning": "warning", "info": "note"}
# the schema's codes: findings from loading a file, not from a rule
SCHEMA_CODES = {
    "SCH000": (
        "schema.unreadable",
        "The file can be read and parsed (YAML syntax, encoding, size), and reads "
        "as it parses (no hidden line break or direction control)",
    ),
    "SCH001": ("schema.bad-value", "Every field has a value of its type, within its range"),
    "SCH002": ("schema.unknown-key", "Every key is one the schema knows"),
    "SCH003": ("schema.matrix", "The matrix expands into recipes"),
}


def _uri(file: str) -> str:
    p = Path(file)
    return p.resolve().as_uri() if p.is_absolute() else quote(p.as_posix())


def _descriptors() -> list[dict[str, Any]]:
    out = []
    for code, (name, title) in SCHEMA_CODES.items():
        out.append(
            {
                "id": code,
                "name": name,
                "shortDescription": {"text": title},
                "defaultConfiguration": {"level": "error"},
                "properties": {"category": "schema"},
            }
        )
    for r in all_rules():
        page = rule_page(r)
        out.append(
            {
                "id": r.code,
                "name": r.name,
                "shortDescription": {"text": r.title},
                "fullDescription": {"text": r.doc["What it checks"]},
                "help": {"text": page, "markdown": f"```\n{page}```"},
                "defaultConfiguration": {"level": LEVELS[r.severity.value]},
                "properties": {
                    "category": r.category.value,
                    "source": r.source,
                    "applies": r.applies,
                    "tags": [r.category.value],
                },
            }
        )
    return out


def _result(d: Diagnostic, index: dict[str, int]) -> dict[str, Any]:
    region = {"startLine": d.line} if d.line is not None else None
    if region is not None and d.col is not None:
        region["startColumn"] = d.col
    physical: dict[str, Any] = {"artifactLocation": {"uri": _uri(d.file)}}
    if region:
        physical["region"] = region
    location: dict[str, Any] = {"physicalLocation": physical}
    if d.path:
        location["logicalLocations"] = [{"fullyQualifiedName": d.path, "kind": "member"}]
    result: dict[str, Any] = {
        "ruleId": d.code,
        "level": LEVELS[d.severity.value],
        "message": {"text": d.message},
        "locations": [location],
    }
    if d.code in index:
        result["ruleIndex"] = index[d.code]
    props = {
        k: v
        for k, v in (("fix", d.fix), ("category", d.category.value if d.category else None), ("source", d.source))
        if v
    }
    if props:
        result["properties"] = props
    if d.ignored is not None:
        kind = "inSource" if d.ignored.startswith("the recipe's ignore:") else "external"
        result["suppressions"] = [{"kind": kind, "justification": d.ignored}]
    return result


def reports_to_sarif(reports: list[FileReport]) -> str:
    rules = _descriptors()
    index = {r["id"]: i for i, r in enumerate(rules)}
    results = [
        _result(d, index)
        for rep in reports
        for d in (*sorted_diagnostics(rep.diagnostics), *sorted_diagnostics(rep.ignored))
    ]
    log = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "recipectl",
                        "version": __version__,
                        "semanticVersion": __version__,
                        "rules": rules,
                    }
                },
                "artifacts": [{"location": {"uri": _uri(rep.file)}} for rep in reports],
                "results": results,
                "columnKind": "unicodeCodePoints",
            }
        ],
    }
    return json.dumps(log, indent=2)
