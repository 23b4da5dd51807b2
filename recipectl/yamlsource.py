"""YAML text -> plain data plus where every key stands, within limits.

The layer under the loader (recipes) and the importers (other tools' formats): a document is
composed once, walked to record each key's line and column and to refuse what no recipe can be
(an alias bomb, a recursive alias, nesting past MAX_DEPTH, unknown tags, unconstructible or
out-of-range scalars, invalid Unicode, characters that make the text read other than it parses),
then constructed. Problems are raised as `Refused` or
`DuplicateKey` (with their YAML marks); the loader words them as findings.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .fileio import read_text_bounded
from .secretscan import secret_name, secret_value

Position = tuple[int, int]  # 1-based line, column
PathKey = tuple[str | int, ...]


@dataclass
class SourceMap:
    """Where each key/item of the YAML document stands (1-based line, column)."""

    file: str
    positions: dict[PathKey, Position] = field(default_factory=dict)
    # an imported pair of scripts: the paths whose position is in another file than `file`
    files: dict[PathKey, str] = field(default_factory=dict)

    def file_of(self, path: PathKey) -> str:
        """The file `locate(path)` points into."""
        path = tuple(path)
        while path:
            if path in self.positions:
                return self.files.get(path, self.file)
            path = path[:-1]
        return self.file

    def locate(self, path: PathKey) -> Position | None:
        """The position of `path`, or of its nearest ancestor that exists in the file."""
        path = tuple(path)
        while path:
            if path in self.positions:
                return self.positions[path]
            path = path[:-1]
        return self.positions.get((), None)


def dotted_to_key(path: str) -> PathKey:
    out: list[str | int] = []
    for part in path.split(".") if path else []:
        out.append(int(part) if part.isdigit() else part)
    return tuple(out)


def key_to_dotted(key: PathKey) -> str:
    return ".".join(str(p) for p in key)


# Limits on what one recipe file may ask of the loader. A recipe is a few hundred nodes; these are
# far past any real one and keep a hostile file (an alias bomb, a 1,000-deep nesting, a 4 KB
# matrix of millions of combinations) to a fast refusal instead of minutes of CPU and gigabytes.
MAX_FILE_BYTES = 1 << 20  # 1 MiB of YAML
MAX_NODES = 20_000  # nodes of the document with every alias expanded
MAX_DEPTH = 64  # nested mappings/sequences
MAX_INT = 2**53  # larger whole numbers mean nothing in a recipe (and lose precision as floats)

_STD = "tag:yaml.org,2002:"
_TAGS_CHECKED = {_STD + t for t in ("bool", "int", "float", "null", "timestamp")}
_TAGS_OK = _TAGS_CHECKED | {_STD + t for t in ("str", "seq", "map", "merge")}


class DuplicateKey(Exception):
    def __init__(self, key: str, mark: yaml.Mark, first: yaml.Mark):
        self.key, self.mark, self.first = key, mark, first


class Refused(Exception):
    """The document is well-formed YAML that no recipe can be: reported at `mark`, never constructed."""

    def __init__(self, message: str, mark: yaml.Mark | None, path: PathKey, fix: str | None = None):
        self.message, self.mark, self.path, self.fix = message, mark, path, fix


def _tag_name(tag: str) -> str:
    return "!!" + tag[len(_STD) :] if tag.startswith(_STD) else tag


class Walker:
    """Records where each key stands, and refuses what would make construction or validation
    blow up: aliases that expand past MAX_NODES (or into themselves), nesting past MAX_DEPTH,
    tags a recipe has no use for, scalars their tag cannot construct (`!!bool maybe`,
    `!!int abc`), numbers out of range, .inf/.nan, and text that is not valid Unicode."""

    def __init__(self, loader: Any, positions: dict[PathKey, Position]):
        self.loader = loader
        self.positions = positions
        self.count = 0
        self.open: set[int] = set()  # ids of the collection nodes being walked (an alias to one is a cycle)
        self.spans: list[tuple[int, int, PathKey]] = []  # (start, end) character index of each scalar, its path

    def walk(self, node: yaml.Node, path: PathKey, depth: int = 0) -> None:
        self.count += 1
        if self.count > MAX_NODES:
            raise Refused(
                f"the document expands to more than {MAX_NODES:,} values (aliases included)",
                node.start_mark,
                path,
                "write the values out; a recipe needs a few hundred",
            )
        if node.tag not in _TAGS_OK:
            raise Refused(
                f"tag {_tag_name(node.tag)} has no place in a recipe",
                node.start_mark,
                path,
                "remove the tag; write a plain value",
            )
        if isinstance(node, yaml.ScalarNode):
            self.spans.append((node.start_mark.index, node.end_mark.index, path))
            self._scalar(node, path)
            return
        if depth >= MAX_DEPTH:
            raise Refused(f"nested deeper than {MAX_DEPTH} levels", node.start_mark, path)
        if id(node) in self.open:
            raise Refused(
                "an alias refers to the node that contains it (a recursive alias)",
                node.start_mark,
                path,
                "anchor a value, and use its alias outside of it",
            )
        self.open.add(id(node))
        try:
            if isinstance(node, yaml.MappingNode):
                self._mapping(node, path, depth)
            else:
                for i, item in enumerate(node.value):
                    self.positions[path + (i,)] = (item.start_mark.line + 1, item.start_mark.column + 1)
                    self.walk(item, path + (i,), depth + 1)
        finally:
            self.open.discard(id(node))

    def _mapping(self, node: yaml.MappingNode, path: PathKey, depth: int) -> None:
        seen: dict[str, yaml.Mark] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _STD + "merge":  # `<<: *anchor`: keys keep the anchor's position
                merged = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                for m in merged:
                    if isinstance(m, yaml.MappingNode):
                        self.walk(m, path, depth)
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                raise Refused("a key must be a plain name, not a list or mapping", key_node.start_mark, path)
            key = str(key_node.value)
            child = path + (key,)
            self.walk(key_node, child, depth + 1)
            if key in seen:
                raise DuplicateKey(key, key_node.start_mark, seen[key])
            seen[key] = key_node.start_mark
            self.positions[child] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            self.walk(value_node, child, depth + 1)

    def _scalar(self, node: yaml.ScalarNode, path: PathKey) -> None:
        value = node.value
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise Refused(
                "the text is not valid Unicode (a lone surrogate, e.g. an escaped \\udc80)",
                node.start_mark,
                path,
                "remove the escape, or write the character itself",
            ) from None
        if node.tag not in _TAGS_CHECKED:
            return
        implicit = self.loader.resolve(yaml.ScalarNode, value, (True, False))
        accepted = {node.tag} | ({_STD + "int"} if node.tag == _STD + "float" else set())
        if implicit not in accepted:
            raise Refused(
                f"{quoted(value, path)} is not a valid {_tag_name(node.tag)}",
                node.start_mark,
                path,
                {
                    "bool": "write true or false",
                    "int": "write a whole number",
                    "float": "write a number",
                    "null": "write null, or remove the key",
                }.get(node.tag[len(_STD) :], "remove the tag"),
            )
        try:
            constructed = self.loader.construct_object(node)
        except (ValueError, OverflowError, yaml.YAMLError):  # e.g. past Python's 4,300-digit int limit
            raise Refused(
                f"{quoted(value, path)} is not a valid {_tag_name(node.tag)}", node.start_mark, path
            ) from None
        if isinstance(constructed, bool) or not isinstance(constructed, (int, float)):
            return
        if (
            isinstance(constructed, float)
            and constructed != constructed
            or constructed in (float("inf"), float("-inf"))
        ):
            raise Refused(
                f"{quoted(value, path, bare=True)} is not a finite number",
                node.start_mark,
                path,
                "write a finite number",
            )
        if abs(constructed) > MAX_INT:
            raise Refused(
                f"{quoted(value, path, bare=True)} is out of range (a recipe's numbers are below 2**53)",
                node.start_mark,
                path,
                "write a realistic number",
            )


# Characters that make a file read other than it parses. YAML 1.1 (PyYAML, libyaml) breaks lines at
# NEL (U+0085) and the line and paragraph separators (U+2028, U+2029), which editors, grep and diff
# show inside one line: after `# note` + U+2028, `ignore: {OPS001: x}` is a key the parser reads and a
# reviewer sees as part of a comment. The bidirectional embeddings, overrides and isolates
# (U+202A-U+202E, U+2066-U+2069; "Trojan Source", CVE-2021-42574) reorder how a line is shown. None
# has a use in a recipe, in a comment or anywhere else; values refuse them too (fieldtypes).
HIDDEN_CHARACTERS = re.compile("[\x85\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def hidden_character(
    text: str, spans: list[tuple[int, int, PathKey]] | None = None, file: str = "<recipe>"
) -> Refused | None:
    """The refusal of the first hidden line break or direction control in `text`, at its line and
    column as an editor counts them (lines end at \\n only), and the path of the key or value that
    holds it among `spans` (the Walker's; none for a comment); None when the text has none."""
    m = HIDDEN_CHARACTERS.search(text)
    if m is None:
        return None
    i = m.start()
    line = text.count("\n", 0, i)
    col = i - (text.rfind("\n", 0, i) + 1)
    ch = m.group()
    name = unicodedata.name(ch, "NEXT LINE" if ch == "\x85" else "a control character")
    path = next((p for start, end, p in spans or () if start <= i < end), ())
    what = (
        "YAML breaks the line here, while editors, grep and diff show one line"
        if ch in "\x85\u2028\u2029"
        else "it reorders how the text around it is shown"
    )
    where = " in a key or value" if path else "" if spans is None else " outside every key and value (a comment)"
    return Refused(
        f"U+{ord(ch):04X} ({name}){where}: {what}",
        yaml.Mark(file, i, line, col, None, i),
        path,
        f"delete the character (grep -nP '\\x{{{ord(ch):04X}}}' finds each one)",
    )


def short(text: str, limit: int = 40) -> str:
    """A value as a message may quote it: long ones cut (a message never carries a whole blob)."""
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


_QUOTE_LIMIT = 40  # longer values are never quoted back in a message


def may_quote(value: Any, path: PathKey) -> bool:
    """Whether a message may quote `value` back: short, not under a credential-named key (an env
    var, a flag's neighbour), not credential-shaped. Findings are printed, logged, pasted."""
    if isinstance(value, (bytes, bytearray)):
        return False
    text = str(value)
    if len(text) > _QUOTE_LIMIT or secret_value(text):
        return False
    return not any(isinstance(p, str) and secret_name(p) for p in path)


def quoted(value: str, path: PathKey, *, bare: bool = False) -> str:
    """`value` as a refusal may quote it (cut when long), or "the value" where it must not be quoted."""
    if secret_value(value) or not may_quote(value[:_QUOTE_LIMIT], path):
        return "the value"
    return short(value) if bare else repr(short(value))


# libyaml's parser (PyYAML's C binding, in its wheels) composes a recipe ~10x faster than the pure
# Python one, with the same node tree, tags and marks. Its error messages are terser, so a file it
# rejects is parsed again by the Python parser, whose message (and position) is the one reported.
FAST_LOADER = getattr(yaml, "CSafeLoader", None)


def read_recipe_text(path: str | Path, limit: int = MAX_FILE_BYTES) -> str:
    """The text of a regular file of at most `limit` bytes (`fileio.read_text_bounded`). Raises
    `fileio.UnreadableFile` (a `ValueError`) for what is not a readable recipe file."""
    return read_text_bounded(path, limit)


def compose_documents(text: str, loader_class: type | None = None) -> Iterator[tuple[Any, dict[PathKey, Position]]]:
    """Each document of a YAML stream as (data, positions), walked within the limits. Raises
    yaml.YAMLError, Refused or DuplicateKey."""
    loader = (loader_class or FAST_LOADER or yaml.SafeLoader)(text)
    try:
        while loader.check_node():
            node = loader.get_node()
            positions: dict[PathKey, Position] = {(): (node.start_mark.line + 1, node.start_mark.column + 1)}
            walker = Walker(loader, positions)
            walker.walk(node, ())
            hidden = hidden_character(text, walker.spans)
            if hidden is not None:
                raise hidden
            yield loader.construct_document(node), positions
    finally:
        loader.dispose()
