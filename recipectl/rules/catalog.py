"""Every rule family, imported once: importing a family module registers its rules in the
registry (registry.py), which itself imports no family."""

from __future__ import annotations

from . import (  # noqa: F401 - imported for their @rule registrations
    capacity,
    consistency,
    cpu,
    deploytime,
    engine_args,
    hybrid,
    operability,
    performance,
    sizing,
    topology,
    transfer,
    versions,
)
from .registry import REGISTRY, Rule


def all_rules() -> list[Rule]:
    return [REGISTRY[c] for c in sorted(REGISTRY)]


def get_rule(code_or_name: str) -> Rule | None:
    key = code_or_name.strip()
    if key.upper() in REGISTRY:
        return REGISTRY[key.upper()]
    return next((r for r in REGISTRY.values() if r.name == key), None)
