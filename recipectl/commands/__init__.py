"""Presentation of the commands: what each prints and the exit code it returns. cli.py (and, for
validate and render, entry.py) parse the command line and call these."""

from __future__ import annotations

import sys


def echo(text: str) -> None:
    """Write `text` to stdout, ending it with one newline."""
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
