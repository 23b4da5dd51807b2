"""Variables as a launch script or a container spec gives them to a server's command line.

Shell (POSIX parameter expansion, what launch scripts use): `NAME=value` and `export NAME=value`
(the value expanded when assigned), `$NAME`, `${NAME}`, `${NAME:-word}` / `${NAME-word}` (the word
when unset, or also when empty), `${NAME:=word}`; a `$` the script quoted stays text. An array
written out (`NAME=(--tp 8 "a b")`, `NAME+=(...)`, `declare -a NAME=(...)`) is read: a word that is
all `"${NAME[@]}"` becomes its items, each where the script wrote it (`"${NAME[*]}"` one word of
them, unquoted each split at blanks). One whose items are known only when the script runs (`read
-a NAME`, `declare -a NAME`, an item with a reference left unresolved, a string assigned into it,
an append to what the environment holds) is not, nor is any other use of an array (`${NAME[1]}`,
`${#NAME[@]}`, `x${NAME[@]}`), and the reader says so. No array is exported, as in bash.

Kubernetes (a container's `command` and `args`): `$(VAR)` is the container's env variable VAR,
`$$(VAR)` the text `$(VAR)`, an unknown `$(VAR)` stays as written (the kubelet's own rule). A
variable whose value the file does not hold (a Secret, a field reference) stays unresolved.

An unresolved reference is left as written in the word, so that it reaches the recipe and rule
IMP001 reports it (recipectl.placeholders) — never a silent skip. A command substitution
(`$(cat model.txt)`) is not run: a variable assigned one is unknown, and the importers do not
carry a value that holds one (flags.py).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from .registry import NotImportable
from .shellwords import Word

# The longest a variable's value may grow by expansion: far past any command line, far short of
# what ten lines of `B=$A$A$A...` reach (each ten times the last: gigabytes by the ninth)
MAX_EXPANDED_CHARS = 1 << 18


# How many references may lie one inside another's default word (`${A:-${B:-${C}}}`: 3); far past
# any script's, far short of Python's recursion limit
MAX_NESTED_REFERENCES = 64


# what a refused expansion tells the user to do
_VALUE_FIX = "write the value itself; recipectl reads a script's variables as data"
_ARRAY_FIX = "write the flags themselves; recipectl reads a script's arrays as data"


class Unexpandable(NotImportable):
    """A word whose expansion recipectl refuses (too large, nested too deep); said by
    :func:`located` at the word's file:line:col."""


@contextmanager
def located(file: str, w: Word) -> Iterator[None]:
    """Expansion refused inside: said at ``w``'s place in ``file``, as a compiler says an error."""
    try:
        yield
    except Unexpandable as e:
        raise NotImportable(f"{file}:{w.line}:{w.col}: {e.message}", fix=e.fix) from None


# The most items an array, or a command its arrays spliced into, may hold: far past any command
# line's flags, far short of what forty lines of `A=("${A[@]}" "${A[@]}")` reach by doubling
MAX_ARRAY_ITEMS = 4096
# The most words a script's arrays may give, all their uses together: far past any script's, far
# short of the minutes 5,000 lines of `B=(${A[@]})` over 4,096 items took
MAX_SPLICED_WORDS = 1 << 18
# The most characters one command's words may hold expanded: far past any command line, far short
# of 20,000 uses of a variable of 256 K characters (5 GB)
MAX_COMMAND_CHARS = 1 << 22
# The most characters a script's assignments, array items and commands may make in all: far past
# any script's, far short of what a megabyte of `Y=$X` lines over 256 K characters makes (30 GB)
MAX_SCRIPT_CHARS = 1 << 26


def _bounded(text: str) -> str:
    if len(text) > MAX_EXPANDED_CHARS:
        raise Unexpandable(
            f"a variable expands to more than {MAX_EXPANDED_CHARS:,} characters (references that repeat each other)",
            fix="write the value itself; recipectl reads a script's or a container's variables as data",
        )
    return text


_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_NAME_AT = re.compile(_NAME)
_BRACE = re.compile(r"\$\{|\}")
_BRACED = re.compile(r"(?P<name>" + _NAME + r")(?:(?P<op>:?[-=])(?P<word>.*))?\Z", re.S)
_ARRAY_USE = re.compile(r"(?P<name>" + _NAME + r")\[[^\]]*\]\Z")
_K8S_REF = re.compile(r"\$\$\(|\$\((?P<name>" + _NAME + r")\)")


@dataclass
class Expanded:
    """A word after expansion: its text (an unresolved reference left as written), and what could
    not be resolved."""

    text: str
    unresolved: list[str] = field(default_factory=list)  # the references, as written
    arrays: list[str] = field(default_factory=list)  # the array names among them


@dataclass
class Scope:
    """A script's variables as it runs top to bottom: values, which are exported, which are arrays."""

    values: dict[str, str] = field(default_factory=dict)
    file: str = ""  # the script's file, where a refused expansion is said
    exported: set[str] = field(default_factory=set)
    arrays: set[str] = field(default_factory=set)
    items: dict[str, tuple[Word, ...]] = field(default_factory=dict)  # the arrays whose items are known
    where: dict[str, Word] = field(default_factory=dict)  # the word that set each one
    spliced: int = 0  # the words its arrays have given so far (MAX_SPLICED_WORDS)
    made: int = 0  # the characters its expansions have made so far (MAX_SCRIPT_CHARS)

    def charge(self, chars: int) -> None:
        """Count ``chars`` more characters made; refused past MAX_SCRIPT_CHARS in all."""
        self.made += chars
        if self.made > MAX_SCRIPT_CHARS:
            raise Unexpandable(
                f"the script's variables expand to more than {MAX_SCRIPT_CHARS:,} characters in all",
                fix=_VALUE_FIX,
            )

    def assign(self, name: str, value: str, w: Word, *, export: bool = False) -> None:
        self.values[name] = value
        self.arrays.discard(name)
        self.items.pop(name, None)
        self.where[name] = w
        if export:
            self.exported.add(name)

    def array(self, name: str, w: Word, items: tuple[Word, ...] | None = None) -> None:
        """``name`` is an array; ``items``: its items, where they are known."""
        self.values.pop(name, None)
        self.arrays.add(name)
        self.where[name] = w
        if items is None:
            self.items.pop(name, None)
        else:
            self.items[name] = items


def expand(text: str, scope: Scope, literal: tuple[int, ...] = (), *, depth: int = 0) -> Expanded:
    """Shell parameter expansion of one word's text; `literal`: offsets of the `$` and `}` it quoted;
    `depth`: the references this word lies inside (a default word's: MAX_NESTED_REFERENCES at most)."""
    quoted = sorted(literal)
    closing = _closing_braces(text, set(quoted))
    out = Expanded("")
    parts: list[str] = []
    pos = i = 0
    while (i := text.find("$", i)) != -1:
        k = bisect.bisect_left(quoted, i)
        if k < len(quoted) and quoted[k] == i:
            i += 1
            continue
        if text.startswith("${", i):
            end = closing.get(i)
            if end is None:  # a brace never closed: bash refuses the word; said, never read
                out.unresolved.append(text[i:])
                break
            braced, name = text[i + 2 : end - 1], None
        elif m := _NAME_AT.match(text, i + 1):
            end, braced, name = m.end(), None, m.group(0)
        else:
            i += 1
            continue
        if depth >= MAX_NESTED_REFERENCES:
            raise Unexpandable(
                f"references nested more than {MAX_NESTED_REFERENCES} deep (${{A:-${{B:-...}}}})",
                fix=_VALUE_FIX,
            )
        parts.append(text[pos:i])
        # the quoted `$` and `}` inside the braces, from where they open
        inner = tuple(q - i - 2 for q in quoted[k : bisect.bisect_left(quoted, end)] if q > i + 1)
        parts.append(_one(text[i:end], braced, name, scope, out, inner, depth))
        pos = i = end
    parts.append(text[pos:])
    out.text = _bounded("".join(parts))
    return out


def _closing_braces(text: str, quoted: set[int]) -> dict[int, int]:
    """Where each unquoted `${` of ``text`` ends: the offset past its matching `}` (a default word
    may hold references of its own, ``${A:-${B}/x}``), in one pass; none for a brace never closed."""
    ends: dict[int, int] = {}
    opened: list[int] = []
    for m in _BRACE.finditer(text):
        if m.group(0) == "${":
            if m.start() not in quoted:
                opened.append(m.start())
        elif opened and m.start() not in quoted:  # `${A:-'}'x}`: a quoted `}` is text
            ends[opened.pop()] = m.end()
    return ends


def _one(
    written: str,
    braced: str | None,
    name: str | None,
    scope: Scope,
    out: Expanded,
    literal: tuple[int, ...],
    depth: int,
) -> str:
    """One reference's value (``literal``: the quoted `$` and `}` offsets within ``braced``)."""
    if braced is None:
        assert name is not None
        return _value(name, written, scope, out)
    arr = _ARRAY_USE.match(braced)
    if arr:
        out.unresolved.append(written)
        out.arrays.append(arr.group("name"))
        return written
    b = _BRACED.match(braced)
    if b is None:  # ${#X}, ${X%suffix}, ${X:+word}: not read
        out.unresolved.append(written)
        return written
    name, op, word = b.group("name"), b.group("op"), b.group("word")
    value = scope.values.get(name)
    if op is None:
        return _value(name, written, scope, out)
    unset = value is None and name not in scope.arrays
    empty = value == ""
    if unset or (empty and op.startswith(":")):
        start = b.start("word")
        default = expand(word or "", scope, tuple(k - start for k in literal if k >= start), depth=depth + 1)
        out.unresolved += default.unresolved
        out.arrays += default.arrays
        if op.endswith("=") and not default.unresolved:
            scope.values[name] = default.text
        return default.text
    return _value(name, written, scope, out)


def _value(name: str, written: str, scope: Scope, out: Expanded) -> str:
    if name in scope.arrays:
        out.unresolved.append(written)
        out.arrays.append(name)
        return written
    value = scope.values.get(name)
    if value is None:
        out.unresolved.append(written)
        return written
    return value


def expand_word(w: Word, scope: Scope) -> tuple[Word, Expanded]:
    """A word with its variables expanded; a word with anything unresolved keeps its text as
    written, so that the finding quotes what the original says. A refusal is said where the
    caller holds the word (``located``)."""
    e = expand(w.text, scope, w.literal)
    if e.unresolved:
        return w, e
    return replace(w, text=e.text, literal=(), double_quoted=()), e


_WHOLE_ARRAY = re.compile(r"\$\{(?P<name>" + _NAME + r")\[(?P<all>[@*])\]\}\Z")


def _array_name(w: Word) -> str | None:
    """The array ``w`` is all of (`"${NAME[@]}"`, `${NAME[*]}`), else None."""
    m = _WHOLE_ARRAY.match(w.text)
    return m.group("name") if m and 0 not in w.literal else None


def _splice(w: Word, items: tuple[Word, ...], scope: Scope, into: list[Word], what: str) -> None:
    """``w`` (all of an array) as bash gives it, into ``into``: `"${A[@]}"` each item a word,
    `"${A[*]}"` one word of them all, unquoted each item split at blanks. Refused (``what``) past
    MAX_ARRAY_ITEMS words in ``into``, or MAX_SPLICED_WORDS over the script, as they are made."""
    if 0 not in w.double_quoted:
        parts: Iterable[Word] = (replace(item, text=part) for item in items for part in item.text.split())
    elif w.text.endswith("[*]}"):
        parts = [replace(items[0] if items else w, text=" ".join(i.text for i in items), literal=(), double_quoted=())]
    else:
        parts = items
    for part in parts:
        into.append(part)
        scope.spliced += 1
        if len(into) > MAX_ARRAY_ITEMS:
            raise Unexpandable(what, fix=_ARRAY_FIX)
        if scope.spliced > MAX_SPLICED_WORDS:
            raise Unexpandable(f"the script's arrays give more than {MAX_SPLICED_WORDS:,} words in all", fix=_ARRAY_FIX)


def expand_words(words: list[Word], scope: Scope) -> list[Word]:
    """A command's words expanded, a word that is all of an array whose items are known
    (`"${NAME[@]}"`, `"${NAME[*]}"`, unquoted) given as bash gives it (``_splice``), each item
    where the script wrote it. Any other word: expand_word. Refused past MAX_ARRAY_ITEMS words or
    MAX_COMMAND_CHARS characters, as they are made."""
    out: list[Word] = []
    chars = 0
    for w in words:
        with located(scope.file, w):
            name = _array_name(w)
            items = scope.items.get(name) if name is not None else None
            before = len(out)
            if items is None:
                out.append(expand_word(w, scope)[0])
            else:
                _splice(w, items, scope, out, f"a command grows past {MAX_ARRAY_ITEMS:,} words by its arrays")
            made = sum(len(x.text) for x in out[before:])
            chars += made
            scope.charge(made)
            if chars > MAX_COMMAND_CHARS:
                raise Unexpandable(
                    f"a command's words expand to more than {MAX_COMMAND_CHARS:,} characters",
                    fix=_VALUE_FIX,
                )
    return out


def expand_k8s(text: str, env: dict[str, str | None]) -> Expanded:
    """Kubernetes' `$(VAR)` expansion of a command or args item against the container's env (a
    value None: set from what the file does not hold)."""
    out = Expanded("")

    def sub(m: re.Match) -> str:
        if m.group(0) == "$$(":
            return "$("
        name = m.group("name")
        value = env.get(name)
        if value is None:
            out.unresolved.append(m.group(0))
            return m.group(0)
        return value

    out.text = _bounded(_K8S_REF.sub(sub, text))
    return out


_ASSIGN = re.compile(r"(?P<name>" + _NAME + r")\+?=(?P<value>.*)\Z", re.S)
_DECLARERS = ("declare", "typeset", "local", "readonly")


def assignment(w: Word) -> tuple[str, str] | None:
    m = _ASSIGN.match(w.text)
    return (m.group("name"), m.group("value")) if m else None


def read_assignments(words: list[Word], scope: Scope) -> bool:
    """Apply a command that only sets variables (`A=1 B=2`, `export A=1`, `declare -a A`,
    `read -a A`, `A=(x y)`) to `scope`; True when the command was one. A value that cannot be
    resolved makes the variable unknown (its uses stay as written)."""
    if words and all(assignment(w) for w in words):
        for w in words:
            _assign(w, scope, export=assignment(w)[0] in scope.exported)  # type: ignore[index]
        return True
    rest = list(words)
    while rest and assignment(rest[0]):  # `IFS=, read ...`: for that command only
        rest = rest[1:]
    if not rest:
        return False
    head, args = rest[0].text, rest[1:]
    flags = "".join(w.text.lstrip("-") for w in args if w.text.startswith("-"))
    if head == "export" or head in _DECLARERS:
        for w in args:
            if w.text.startswith("-"):
                continue
            a = assignment(w)
            if a and w.items is not None:
                _assign(w, scope, export=head == "export")
            elif "a" in flags or (a and a[1].startswith("(")):
                scope.array(a[0] if a else w.text, w)
            elif a:
                _assign(w, scope, export=head == "export")
            elif head == "export" and re.fullmatch(_NAME, w.text):
                scope.exported.add(w.text)
        return True
    if head == "read":
        names = [w for w in args if re.fullmatch(_NAME, w.text)]
        for w in names:
            if "a" in flags:
                scope.array(w.text, w)
            elif w.text in scope.arrays:  # into the array's first item: the array known when it runs
                scope.array(w.text, w)
            else:  # read from input: known only when the script runs
                scope.values.pop(w.text, None)
                scope.where[w.text] = w
        return True
    return False


def _assign(w: Word, scope: Scope, *, export: bool) -> None:
    name, value = assignment(w)  # type: ignore[misc]
    appends = w.text[len(name)] == "+"  # `NAME+=...`
    if w.items is not None:
        with located(scope.file, w):
            if w.unclosed:
                raise Unexpandable(
                    f"the array {name}'s `(` is never closed: bash refuses the script",
                    fix=f"close it with `)` after its last item, as in {name}=(--tensor-parallel-size 2)",
                )
            scope.array(name, w, _array_items(w.items, scope, _appended_to(name, scope) if appends else ()))
        return
    if value.startswith("(") or name in scope.arrays:
        # `A=(x)y`, or a string into an array (its first item, the rest kept): not read, said
        scope.array(name, w)
        return
    offset = len(name) + 1 + appends
    with located(scope.file, w):
        e = expand(value, scope, tuple(k - offset for k in w.literal if k >= offset))
        if appends:  # a string's append: known where the value before it is
            if (before_text := scope.values.get(name)) is None:
                e.unresolved.append(f"${name}")
            e.text = _bounded((before_text or "") + e.text)
    if e.unresolved or w.substitutions:  # known when the script runs: its uses stay as written
        scope.values.pop(name, None)
        scope.arrays.discard(name)
        scope.where[name] = w
        if export:
            scope.exported.add(name)
        return
    with located(scope.file, w):
        scope.charge(len(e.text))
    scope.assign(name, e.text, w, export=export)


def _appended_to(name: str, scope: Scope) -> tuple[Word, ...] | None:
    """What `NAME+=(...)` appends to: the array's items, or a string's value as its one item; None
    where that is known only when the script runs, or the name was never set (the environment's)."""
    if name in scope.arrays:
        return scope.items.get(name)
    if name in scope.values:
        return (replace(scope.where[name], text=scope.values[name], literal=(), double_quoted=(), items=None),)
    return None


def _array_items(written: tuple[Word, ...], scope: Scope, before: tuple[Word, ...] | None) -> tuple[Word, ...] | None:
    """An array's items expanded (``before``: the items it appends to), None where any is known
    only when the script runs (its uses are then said, never read); refused past MAX_ARRAY_ITEMS
    items, as they are made."""
    if before is None:
        return None
    items: list[Word] = list(before)
    too_many = f"an array grows past {MAX_ARRAY_ITEMS:,} items (arrays that repeat each other)"
    for w in written:
        if (name := _array_name(w)) is not None:
            if name not in scope.items:
                return None
            _splice(w, scope.items[name], scope, items, too_many)
            continue
        with located(scope.file, w):  # at the item's own place
            expanded, e = expand_word(w, scope)
        if e.unresolved or w.substitutions:
            return None
        items.append(expanded)
        scope.charge(len(expanded.text))
        if len(items) > MAX_ARRAY_ITEMS:
            raise Unexpandable(too_many, fix=_ARRAY_FIX)
    return tuple(items)
