"""Rule documentation from the registry: `recipectl explain`, `rules --format json`, docs/rules.md."""

from __future__ import annotations

import json

from .rules.catalog import all_rules
from .rules.registry import SEVERITY_POLICY, Rule


def rule_page(r: Rule) -> str:
    lines = [f"{r.code} ({r.name}): {r.title}", "",
             f"Severity: {r.severity.value}    Category: {r.category.value}",
             f"Applies: {r.applies}", f"Source: {r.source}", ""]
    for head in ("What it checks", "Why", "Example", "Fix"):
        lines.append(f"{head}:")
        body = r.doc[head]
        indent = "    " if head in ("Example", "Fix") else "  "
        lines.extend(indent + ln if ln else "" for ln in body.splitlines())
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def rules_json() -> str:
    return json.dumps([{"code": r.code, "name": r.name, "title": r.title, "severity": r.severity.value,
                        "category": r.category.value, "applies": r.applies, "source": r.source,
                        "doc": r.doc} for r in all_rules()], indent=2)


def rules_markdown() -> str:
    """docs/rules.md: generated; tests/test_rules_doc.py fails when the file is stale."""
    rules = all_rules()
    out = ["# Rules", "",
           "Generated from the rule registry by `python -m recipectl.ruledocs > docs/rules.md`; do not edit.",
           "Each rule: what it checks, why, an example that triggers it, the fix, and its source.",
           "Turn one off for a recipe with `ignore: {CODE: reason}`.", "",
           SEVERITY_POLICY, "",
           "| code | name | severity | category | title |", "|---|---|---|---|---|"]
    for r in rules:
        out.append(f"| [{r.code}](#{r.code.lower()}) | `{r.name}` | {r.severity.value} | {r.category.value} "
                   f"| {r.title} |")
    for r in rules:
        out += ["", f"## {r.code}", "", f"**{r.title}** (`{r.name}`) — {r.severity.value}, {r.category.value}", "",
                f"Applies: {r.applies}.", "", "### What it checks", "", r.doc["What it checks"], "",
                "### Why", "", r.doc["Why"], "", "### Example", "", "```yaml", r.doc["Example"], "```", "",
                "### Fix", "", "```yaml", r.doc["Fix"], "```", "", f"Source: {r.source}"]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    import sys

    sys.stdout.write(rules_markdown())
