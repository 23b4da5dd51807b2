"""GPUs that several servers share: which processes, and how much of the GPU's memory each asks.

Endpoints that name the same GPU in `devices` share it; each server takes its role's
`gpu_memory_utilization` of the GPU's memory (vLLM sizes its KV cache so that the server's
memory, CUDA context aside, stays within that fraction). TOP001, `plan`, launch's preflight and
the start order all read these shares from here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..effective import resolve_role
from ..schema import Recipe
from ..topology import Placement, Process

#: vLLM refuses a server whose share is more than the GPU's free memory at start-up (v1
#: `Worker.init_device`: "Free memory on device ... is less than desired GPU memory utilization"):
#: shares above 1 can never start together.
SHARE_MAX = 1.0
#: What launch's preflight allows: each server holds memory beyond its share (its CUDA context
#: and the like: 1.56 GiB for a Qwen3.5-9B server on an H200, docs/gpu-evidence.md), and the later
#: server checks its share against what the earlier ones left.
SHARE_PREFLIGHT_MAX = 0.95


@dataclass(frozen=True)
class SharedGpu:
    node: int
    gpu: int
    users: tuple[tuple[Process, float], ...]  # (process, its share of the memory)

    @property
    def total(self) -> float:
        return sum(s for _, s in self.users)

    @property
    def names(self) -> str:
        return " + ".join(f"{p.name} {s:g}" for p, s in self.users)


def role_share(recipe: Recipe, role: str) -> float:
    """The fraction of a GPU's memory a server of this role takes (its effective utilization)."""
    return float(resolve_role(recipe, role)["gpu_memory_utilization"].value)


def shared_gpus(recipe: Recipe, placement: Placement) -> list[SharedGpu]:
    if recipe.cluster.is_cpu:
        return []
    return [
        SharedGpu(node, gpu, tuple((p, role_share(recipe, p.role)) for p in procs))
        for (node, gpu), procs in sorted(placement.shared_gpus.items())
    ]


def even_shares(n: int, limit: float = SHARE_PREFLIGHT_MAX) -> float:
    """A share for each of n servers on one GPU that keeps their sum within `limit` (two decimals,
    rounded down, and 0.05 left for the CUDA contexts)."""
    return math.floor(round((limit - 0.05) / n * 100, 6)) / 100
