"""Edits on a recipe file's text that keep everything else byte for byte.

The edits are made on ruamel.yaml's round-trip document (comments, key order, quoting and flow
style kept). ruamel re-emits some things in its own way even when nothing changed (a flow list
over several lines on one line, the indentation of lists), so its output is not written back
whole: `merge` takes from it only the lines that the edits changed (ruamel's dump of the edited
document against its dump of the untouched one) and keeps the file's own lines everywhere else.
The result is checked to read back as the edited document; where it would not, the file is left
alone (`Unfixable`).

The edits are made on the text with a UTF-8 BOM taken off and every line ending (CRLF, a lone CR)
as LF (`Layout`); the written text gets the BOM back and each line its own ending, so a CRLF
file stays CRLF and a file with mixed endings keeps each line's.

ruamel.yaml is imported here (and by `import`) only: `recipectl fix` needs it, `validate` never
imports this module.
"""

from __future__ import annotations

import io
import re
from collections import Counter
from collections.abc import Sequence
from difflib import SequenceMatcher
from typing import Any

from ruamel.yaml import YAML, YAMLError
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import CommentMark
from ruamel.yaml.tokens import CommentToken
from ruamel.yaml.util import load_yaml_guess_indent

from ..rules.registry import Edit
from ..yamlsource import dotted_to_key


class Unfixable(Exception):
    """An edit that cannot be made in this file without changing more than it says."""


def _yaml(text: str) -> Any:
    y = YAML(typ="rt")
    y.preserve_quotes = True
    y.width = 1 << 16  # never fold a long line
    seq_indent, offset = load_yaml_guess_indent(text)[1:]
    mapping = _mapping_indent(text)
    y.indent(mapping=mapping, sequence=seq_indent or mapping, offset=offset or 0)
    y.representer.add_representer(type(None), lambda r, _: r.represent_scalar("tag:yaml.org,2002:null", "null"))
    return y


def _mapping_indent(text: str) -> int:
    """The indentation of the file's nested keys (2 when it has none)."""
    found = [len(m.group(1)) for m in re.finditer(r"^( +)[^\s#-][^:\n]*:(\s|$)", text, flags=re.M)]
    return min(found, default=2)


_ENDING = re.compile(r"\r\n|\r|\n")
_LINE = re.compile(r"[^\n]*\n|[^\n]+$")
BOM = "\ufeff"


def _lines(text: str) -> list[str]:
    """`text` cut after each LF only (str.splitlines also cuts at U+2028, form feed, ...: those
    are characters of a line, a comment's or a quoted value's, and stay in it)."""
    return _LINE.findall(text)


class Layout:
    """A file's BOM and line endings, taken off for editing and put back after.

    `lf` is the text without the BOM, each line ending an LF. `restore` gives an edited `lf` text
    back its BOM, and each line the original keeps its own ending; a line the edit wrote gets the
    ending of the line it replaces (or follows), else the file's most common one."""

    def __init__(self, text: str):
        self.bom = text.startswith(BOM)
        body = text[len(BOM) :] if self.bom else text
        self.endings = _ENDING.findall(body)
        self.lf = _ENDING.sub("\n", body)
        self.lines = _lines(self.lf)
        self.default = Counter(self.endings).most_common(1)[0][0] if self.endings else "\n"

    def restore(self, lf_text: str) -> str:
        new = _lines(lf_text)
        out: list[str] = [BOM] if self.bom else []
        for tag, i1, i2, j1, j2 in SequenceMatcher(None, self.lines, new, autojunk=False).get_opcodes():
            if tag == "equal":
                out += [self._ended(self.lines[i], self._ending(i)) for i in range(i1, i2)]
            else:
                ending = self._ending(i1 if i1 < i2 else i1 - 1)
                out += [self._ended(line, ending) for line in new[j1:j2]]
        return "".join(out)

    def _ending(self, i: int) -> str:
        return self.endings[i] if 0 <= i < len(self.endings) else self.default

    @staticmethod
    def _ended(line: str, ending: str) -> str:
        return line[:-1] + ending if line.endswith("\n") else line


class Document:
    """One recipe file's text and its round-trip document."""

    def __init__(self, text: str):
        """`text` has passed the loader (its limits, the schema); ruamel.yaml reads some YAML the
        loader's parser takes in its own way, and such a file is left alone."""
        self.text = text
        self.layout = Layout(text)
        text = self.layout.lf
        try:
            self._yaml = _yaml(text)  # guessing the indentation parses the file too
            self.data = self._yaml.load(text)
            self._base = self._dump()
        except (YAMLError, ValueError, TypeError) as e:
            raise Unfixable(f"ruamel.yaml cannot read the file for editing: {e}") from None

    def _dump(self) -> str:
        out = io.StringIO()
        self._yaml.dump(self.data, out)
        return out.getvalue()

    @property
    def matrix_keys(self) -> list[str]:
        """The field paths the recipe's `matrix:` sets per variant."""
        matrix = self.data.get("matrix") if isinstance(self.data, dict) else None
        return [str(k) for k in matrix] if isinstance(matrix, dict) else []

    def check(self, edit: Edit) -> None:
        """Raise Unfixable where `edit` cannot be made: its path runs through an anchor, an alias
        or a merge key (the edit would change every place that shares the value), or through
        something other than a mapping."""
        node = self.data
        for depth, key in enumerate(dotted_to_key(edit.path)):
            if node is None and depth:  # `launch:` with nothing under it: apply makes the mapping
                return
            if not isinstance(node, CommentedMap):
                raise Unfixable(
                    f"{edit.path}: {'.'.join(edit.path.split('.')[:depth]) or 'the document'} is not a mapping"
                )
            if node.anchor.value is not None or getattr(node, "merge", None):
                raise Unfixable(f"{edit.path}: the value is shared through a YAML anchor or merge key")
            if key not in node:
                return
            node = node[key]

    def apply(self, edit: Edit) -> None:
        """Make one edit (after `check`): the mappings above the key are made where absent."""
        *parents, last = dotted_to_key(edit.path)
        node, created = self.data, False
        moved = None  # the blank lines and comments after the mapping the new keys go under
        for key in parents:
            if key not in node:
                if not created:
                    moved = _trailing_lines(node)
                node[key] = CommentedMap()
                created = True
            elif node[key] is None:  # a key with nothing under it stands where it is, now a mapping
                node[key] = CommentedMap()
                created = True
            node = node[key]
        if last not in node:
            if not node and not created:  # `env: {}`: an empty mapping in a file is a flow mapping
                node.fa.set_flow_style()
            _append(node, last, edit.value)
            if moved is not None:  # after the whole new block, not between its first line and the rest
                _comment_after(node, last, moved)
            return
        # a block value replaced: the blank lines and comments after its last line stay where they were
        moved = _trailing_lines(node[last])
        node[last] = edit.value
        if moved is not None:
            _comment_after(node, last, moved)

    def text_after(self) -> str:
        """The file's text with the edits made, its other lines as they were."""
        edited = self._dump()
        merged = merge(self.layout.lf, self._base, edited)
        plain = YAML(typ="safe", pure=True)
        if plain.load(merged) != plain.load(edited):
            raise Unfixable("the edit cannot be written without re-formatting the lines around it")
        return self.layout.restore(merged)


def _append(node: Any, key: str | int, value: Any) -> None:
    """Add `key` at the end of a mapping. ruamel keeps the blank lines and comments that follow a
    mapping's last line with that line, which would put them above the new key; they are moved
    below it (all but the end-of-line comment), so that the key goes right after the last one."""
    moved = _trailing_lines(node)
    node[key] = value
    if moved is not None:
        _comment_after(node, key, moved)


def _comment_after(node: Any, key: str | int, text: str) -> None:
    """`text` (starting with the end of the line) after the line of `key` in mapping `node`."""
    entry = node.ca.items.setdefault(key, [None, None, None, None])
    if entry[2] is not None:  # the key's own end-of-line comment comes first
        head, newline, _ = entry[2].value.partition("\n")
        text = head + text
    entry[2] = CommentToken(text, CommentMark(0), None)


def _trailing_lines(node: Any) -> str | None:
    """Take, from the comment token after the last line of `node` (its last key, or that key's
    last key, ...), what follows the end of that line; None when nothing follows."""
    found = None
    while isinstance(node, (CommentedMap, CommentedSeq)) and len(node) and not node.fa.flow_style():
        last = next(reversed(node)) if isinstance(node, CommentedMap) else len(node) - 1
        slot = 2 if isinstance(node, CommentedMap) else 0
        entry = node.ca.items.get(last)
        if entry and len(entry) > slot and entry[slot] is not None:
            found = entry[slot]
        node = node[last]
    if found is None:
        return None
    value: str = found.value
    head, newline, tail = value.partition("\n")
    if not tail:
        return None
    found.value = head + newline
    return newline + tail  # a comment token after a key starts with the end of the key's line


def merge(original: str, base: str, edited: str) -> str:
    """`original` with the changes that turn `base` into `edited` (a three-way merge by lines).

    `base` is ruamel's dump of `original` as read, `edited` its dump after the edits. Where
    `original` and `base` differ (ruamel's own formatting) the original's lines are kept; where
    `edited` differs from `base`, its lines are taken; where both happen in one place, the edited
    lines replace that whole place."""
    if original == base:
        return edited
    o, a, b = (_lines(t) for t in (original, base, edited))
    ao = _opcodes(a, o)
    ab = _opcodes(a, b)
    hunks = sorted(
        [(i1, i2, "o") for tag, i1, i2, _, _ in ao if tag != "equal"]
        + [(i1, i2, "b") for tag, i1, i2, _, _ in ab if tag != "equal"]
    )
    out: list[str] = []
    at = 0  # the next line of `a` not yet written
    k = 0
    while k < len(hunks):
        s, e, kinds = hunks[k][0], hunks[k][1], {hunks[k][2]}
        k += 1
        while k < len(hunks) and hunks[k][0] <= e:  # touching or overlapping: one place
            e = max(e, hunks[k][1])
            kinds.add(hunks[k][2])
            k += 1
        out += a[at:s]
        source, ops = (b, ab) if "b" in kinds else (o, ao)
        out += source[_start(ops, s) : _end(ops, e)]
        at = e
    out += a[at:]
    return "".join(out)


# difflib's (tag, i1, i2, j1, j2): a[i1:i2] becomes other[j1:j2]
Opcodes = Sequence[tuple[str, int, int, int, int]]


def _opcodes(a: list[str], other: list[str]) -> Opcodes:
    return SequenceMatcher(None, a, other, autojunk=False).get_opcodes()


def _start(ops: Opcodes, x: int) -> int:
    """Where line `x` of `a` starts in the other text (before anything inserted at `x`)."""
    for tag, i1, i2, j1, _ in ops:
        if i1 <= x < i2 or i1 == i2 == x:
            return j1 + (x - i1 if tag == "equal" else 0)
    return ops[-1][4] if ops else 0


def _end(ops: Opcodes, x: int) -> int:
    """Where the lines of `a` before `x` end in the other text (after anything inserted at `x`)."""
    for tag, i1, i2, j1, j2 in reversed(ops):
        if i1 < x <= i2 or i1 == i2 == x:
            return j1 + (x - i1) if tag == "equal" else j2
    return 0
