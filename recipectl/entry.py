"""The process entry point of `recipectl` and `python -m recipectl`: the Typer app of cli.py."""

from __future__ import annotations

from .cli import main

__all__ = ["main"]
