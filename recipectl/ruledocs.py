"""Rule documentation from the registry: `recipectl explain`, `rules --format json`, docs/rules.md."""

from __future__ import annotations

import json

from .rules.catalog import all_rules
from .rules.registry import SEVERITY_POLICY, Applicability, Rule

FIX_POLICY = (
    "`recipectl fix RECIPE` applies the fixes marked *safe*: they do what the finding asks, nothing more, "
    "and there is one way to do it. Fixes marked *unsafe* change more than the finding (memory, numerics, "
    "a feature turned off, one choice among several) and are applied only with `--unsafe-fixes`. "
    "`--diff` shows the edits and changes nothing; the file's comments, key order and formatting are kept."
)


def fix_line(r: Rule) -> str:
    """What `recipectl fix` does about the rule's findings, in one line."""
    if r.fix is None:
        return "none: the fix needs a choice recipectl cannot make"
    how = "safe" if r.fixable is Applicability.SAFE else "unsafe, with --unsafe-fixes"
    return f"{how}: {r.fix.when}"


def rule_page(r: Rule) -> str:
    lines = [
        f"{r.code} ({r.name}): {r.title}",
        "",
        f"Severity: {r.severity.value}    Category: {r.category.value}",
        f"Applies: {r.applies}",
        f"Source: {r.source}",
        f"recipectl fix: {fix_line(r)}",
        "",
    ]
    for head in ("What it checks", "Why", "Example", "Fix"):
        lines.append(f"{head}:")
        body = r.doc[head]
        indent = "    " if head in ("Example", "Fix") else "  "
        lines.extend(indent + ln if ln else "" for ln in body.splitlines())
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def rules_json() -> str:
    return json.dumps(
        [
            {
                "code": r.code,
                "name": r.name,
                "title": r.title,
                "severity": r.severity.value,
                "category": r.category.value,
                "applies": r.applies,
                "source": r.source,
                "fix": r.fixable.value,
                "fix_applies": r.fix.when if r.fix else None,
                "doc": r.doc,
            }
            for r in all_rules()
        ],
        indent=2,
    )


def rules_markdown() -> str:
    """docs/rules.md: generated; tests/test_rules_doc.py fails when the file is stale."""
    rules = all_rules()
    out = [
        "# Rules",
        "",
        "Generated from the rule registry by `python -m recipectl.ruledocs > docs/rules.md`; do not edit.",
        "Each rule: what it checks, why, an example that triggers it, the fix, and its source.",
        "Turn one off for a recipe with `ignore: {CODE: reason}`.",
        "",
        SEVERITY_POLICY,
        "",
        FIX_POLICY,
        "",
        "| code | name | severity | category | fix | title |",
        "|---|---|---|---|---|---|",
    ]
    for r in rules:
        out.append(
            f"| [{r.code}](#{r.code.lower()}) | `{r.name}` | {r.severity.value} | {r.category.value} "
            f"| {r.fixable.value} | {r.title} |"
        )
    for r in rules:
        out += [
            "",
            f"## {r.code}",
            "",
            f"**{r.title}** (`{r.name}`) — {r.severity.value}, {r.category.value}",
            "",
            f"Applies: {r.applies}.",
            "",
            "### What it checks",
            "",
            r.doc["What it checks"],
            "",
            "### Why",
            "",
            r.doc["Why"],
            "",
            "### Example",
            "",
            "```yaml",
            r.doc["Example"],
            "```",
            "",
            "### Fix",
            "",
            "```yaml",
            r.doc["Fix"],
            "```",
            "",
            f"`recipectl fix`: {fix_line(r)}.",
            "",
            f"Source: {r.source}",
        ]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    import sys

    sys.stdout.write(rules_markdown())
