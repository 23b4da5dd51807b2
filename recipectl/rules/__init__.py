"""Best-practice rules for hybrid P/D recipes: registry in registry.py, one module per family."""

from .catalog import all_rules, get_rule  # noqa: F401
from .engine import check_recipe  # noqa: F401
from .registry import Rule, Violation  # noqa: F401
