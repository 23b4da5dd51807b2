"""The importers' registry: one place where every format recipectl imports is declared.

An importer is a name (names.py), `sniff` — does this file look like mine, from its text and its
name — and `read`, which gives the recipe as plain data with the origin of every field and what it
could not carry. `sniff` is a few regular expressions: every `validate` asks it. `read` is named as
"module:function" and imported the first time a file of that format is read, so that a recipectl
recipe is validated without importing any importer; the first line of its docstring says what it
reads (the error for a file in no known format lists them). formats/__init__.py registers the
importers in the order files are sniffed in; a malformed entry or a name registered twice fails at
import, and tests/test_registry.py resolves every `read`.
"""

from __future__ import annotations

import importlib
import inspect
import re
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable

from ..errors import RecipectlError
from .names import NATIVE

if TYPE_CHECKING:
    from pydantic import ValidationError

    from .common import Imported

PathKey = tuple[str | int, ...]  # a value's place in a document: its keys and list indexes
SniffFn = Callable[[str, str], bool]  # (text, file name) -> does it look like this format
ReadFn = Callable[[str, str], "Imported"]  # (text, file name) -> the recipe, its origins, what was dropped

_NAME_RE = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
_REF_RE = re.compile(r"^recipectl\.formats\.[a-z_][a-z0-9_]*:[a-z_][a-z0-9_]*$")


class NotImportable(RecipectlError):
    """The file is in no format recipectl reads, or says what a recipectl recipe cannot hold."""


@dataclass(frozen=True)
class Importer:
    """A format recipectl imports: its name, how its files are recognised, and where its reader is."""

    name: str
    sniff: SniffFn
    reader: str  # "recipectl.formats.MODULE:FUNCTION", a ReadFn

    @cached_property
    def read(self) -> ReadFn:
        """The reader itself, imported when first asked for."""
        module, _, attr = self.reader.partition(":")
        fn = getattr(importlib.import_module(module), attr)
        if not inspect.cleandoc(fn.__doc__ or ""):
            raise TypeError(
                f"importer {self.name!r}: {self.reader} has no docstring: its first line says what the importer reads"
            )
        return fn

    @property
    def help(self) -> str:
        """What it reads, in words: the first line of its reader's docstring."""
        return inspect.cleandoc(self.read.__doc__ or "").splitlines()[0].rstrip(".")


IMPORTERS: dict[str, Importer] = {}


def register(importer: Importer) -> Importer:
    """Add `importer` after those registered before it (files are sniffed in this order); refuses a
    malformed name (or recipectl's own), a name registered twice, a sniff that is not a function
    and a reader that is not "recipectl.formats.MODULE:FUNCTION"."""
    name = importer.name
    if not _NAME_RE.match(name) or name == NATIVE:
        raise TypeError(f"importer {name!r}: a format's name is lower-case words joined by '-', not {NATIVE!r}")
    if name in IMPORTERS:
        raise TypeError(f"importer {name!r} registered twice")
    if not callable(importer.sniff):
        raise TypeError(f"importer {name!r}: sniff is a function of (text, file name)")
    if not _REF_RE.match(importer.reader):
        raise TypeError(
            f"importer {name!r}: reader {importer.reader!r} must look like recipectl.formats.MODULE:FUNCTION"
        )
    IMPORTERS[name] = importer
    return importer


def known_formats() -> str:
    """The formats `recipectl import` reads, in words, for an error's fix."""
    return "; ".join(f"{i.name} ({i.help})" for i in IMPORTERS.values())


class PeerFileInvalid(NotImportable):
    """A peer file whose values do not have the types its format gives them. The loader turns
    `error` into one finding per value, at its line (`positions`); the message says the same for
    a command that prints one."""

    def __init__(self, file: str, error: ValidationError, data: Any, positions: dict[PathKey, tuple[int, int]]):
        self.error, self.data, self.positions = error, data, positions
        problems = error.errors(include_url=False)
        lines = [_problem(file, e, positions) for e in problems[:5]]
        if len(problems) > 5:
            lines.append(f"... and {len(problems) - 5} more")
        super().__init__("\n".join(lines), fix="give each field a value of the type its format expects")


def _problem(file: str, e: Any, positions: dict[PathKey, tuple[int, int]]) -> str:
    loc = tuple(e["loc"])
    path = loc
    while path and path not in positions:
        path = path[:-1]
    line, col = positions.get(path, positions.get((), (1, 1)))
    return f"{file}:{line}:{col}: {'.'.join(map(str, loc))}: {e['msg']}"
