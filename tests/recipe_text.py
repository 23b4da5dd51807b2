"""Editing a recipe's text in a test: every edit must take, or the test would check the unedited
recipe and pass for the wrong reason."""

from __future__ import annotations

from pathlib import Path


def replace_once(text: str, old: str, new: str) -> str:
    """``text`` with ``old`` replaced by ``new``; ``old`` must occur exactly once."""
    n = text.count(old)
    if n != 1:
        raise AssertionError(f"recipe edit did not take: {old!r} occurs {n} times (expected exactly once)")
    return text.replace(old, new)


def edited(text: str, *edits: tuple[str, str]) -> str:
    """``text`` with each (old, new) applied in turn by :func:`replace_once`."""
    for old, new in edits:
        text = replace_once(text, old, new)
    return text


def write_edited(src: Path, dst: Path, *edits: tuple[str, str]) -> Path:
    dst.write_text(edited(src.read_text(), *edits))
    return dst
