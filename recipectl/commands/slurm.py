"""`launch --target slurm`: not implemented yet."""

from __future__ import annotations

from ..errors import RecipectlError


def launch_slurm(*args, **kwargs) -> int:
    raise RecipectlError("launch --target slurm is not available yet",
                         fix="render the sbatch script: recipectl render RECIPE --target slurm -o DIR")


def cancel_job(state) -> None:
    raise RecipectlError("slurm runs are not supported yet")
