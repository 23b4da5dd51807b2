"""The kinds of model recipectl tells apart: one enum for the recipe schema and the planner."""

from enum import Enum


class ModelFamily(str, Enum):
    """How the layers mix: the planner treats each family's cache differently."""

    HYBRID = "hybrid"  # GDN (linear attention) layers + full-attention layers
    DENSE = "dense"  # full attention + dense MLP
    MOE = "moe"  # full attention + mixture of experts
