"""Best-practice rules for hybrid P/D recipes: registry in registry.py, one module per family."""

from .catalog import all_rules, get_rule
from .engine import check_recipe
from .registry import Rule, Violation

__all__ = ["Rule", "Violation", "all_rules", "check_recipe", "get_rule"]
