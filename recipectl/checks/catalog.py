"""Every family of doctor checks, imported once: importing a family registers its checks in the
registry (doctor.py), which itself imports no family. Rows follow the stages, then registration."""

from __future__ import annotations

from . import endpoints, environment  # noqa: F401 - imported for their @check registrations
from .doctor import REGISTRY, Check


def all_checks() -> list[Check]:
    return list(REGISTRY.values())


def get_check(key: str) -> Check:
    """The registered check `key` (group.slug); KeyError when there is none."""
    return REGISTRY[key]
